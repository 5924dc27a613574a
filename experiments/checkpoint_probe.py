"""Follow one pre-training run through its checkpoints: when does BERT start reading word order, and when
does its pre-training start to transfer?

    bertkit pretrain --data DATA --preset tiny --objective mlm --steps 20000 --checkpoint-every 2000 \\
        --keep-last 100 --valid-documents 100 --out RUN
    python experiments/checkpoint_probe.py RUN --data DATA --glue ../shared/data/glue \\
        --out experiments/results/checkpoint-probe/tiny-mlm.json --doc docs/checkpoint-probe.md

For every checkpoint of RUN (and the random initialisation of the same shape, as step 0) it writes:

- the held-out masked-LM scores of :func:`bertkit.mlm_eval.heldout_mlm` (the same masks for every model),
  with the unigram loss and the *word-order gain* (loss on the same sequences shuffled minus the loss in
  order: 0 for a model that reads its context as a bag of words);
- SST-2 dev accuracy after fine-tuning on the first ``--train-examples`` training sentences, for each rate
  of ``--lrs`` and each seed of ``--seeds`` (the paper's practice: the rate is picked on dev by the mean
  over seeds; mean and sample std of that rate are reported).

One JSON file (every row, the command, commit, CPU, torch) and, with ``--doc``, a Markdown report made from
that file. One thread; CPU seconds are recorded beside wall time because the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, file) of every training checkpoint of ``run``, in step order."""
    found = []
    for f in (run / "checkpoints").glob("step-*.pt"):
        found.append((int(f.stem.split("-")[1]), f))
    return sorted(found)


def model_dir_at(run: Path, data: Path, ckpt: Path | None, work: Path) -> Path:
    """A Hugging Face layout model dir of ``run``'s model at ``ckpt`` (None: the random initialisation)."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.pretrain import save_tokenizer

    cfg = json.loads((run / "run_config.json").read_text())
    vocab = data / "vocab.txt"
    mc = BertConfig.preset(cfg["preset"], vocab_size=len(vocab.read_text(encoding="utf-8").splitlines()),
                           **cfg.get("model_overrides", {}))  # fmt: skip
    state = torch.random.get_rng_state()
    torch.manual_seed(int(cfg.get("seed", 0)))  # the initialisation draws from torch's generator
    model = BertForPreTraining(mc)
    torch.random.set_rng_state(state)
    if ckpt is not None:
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)  # tensors only: never unpickles code
        model.load_state_dict(saved["model"])
    out = work / (ckpt.stem if ckpt else "random")
    model.save_pretrained(out)
    save_tokenizer(vocab, True, out)
    return out


def sst2(model_dir: Path, glue: Path, work: Path, lr: float, seed: int, n: int) -> float:
    """SST-2 dev accuracy (percent) after fine-tuning ``model_dir`` on the first ``n`` training sentences."""
    import torch

    from bertkit.tasks.finetune import Settings, finetune
    from bertkit.tasks.glue import glue_task_data

    torch.manual_seed(seed)
    task = glue_task_data("SST-2", glue / "SST-2")
    s = Settings(epochs=2, batch_size=32, lr=lr, max_seq_length=64, seed=seed, max_train_examples=n,
                 progress=False)  # fmt: skip
    r = finetune(task, model_dir, work / f"sst2-{lr:g}-{seed}", s)
    return round(100 * r["metrics"]["accuracy"], 2)


def probe(
    run: Path, data: Path, glue: Path, lrs: list[float], seeds: list[int], n: int, work: Path
) -> list[dict]:
    from bertkit.mlm_eval import heldout_mlm

    cfg = json.loads((run / "run_config.json").read_text())
    tokens_per_step = int(cfg["batch_size"]) * int(cfg["grad_accum"]) * int(cfg["max_seq_length"])
    rows = []
    for step, ckpt in [(0, None), *checkpoints(run)]:
        t0, c0 = time.time(), time.process_time()
        model_dir = model_dir_at(run, data, ckpt, work)
        held = heldout_mlm(model_dir, data, int(cfg["max_seq_length"]), cfg.get("valid_documents"))
        scores = {lr: [sst2(model_dir, glue, work / model_dir.name, lr, s, n) for s in seeds] for lr in lrs}
        best = max(lrs, key=lambda lr: statistics.mean(scores[lr]))
        row = {"step": step, "tokens": step * tokens_per_step, "heldout": held,
               "sst2": {f"{lr:g}": v for lr, v in scores.items()}, "sst2_lr": best,
               "sst2_mean": round(statistics.mean(scores[best]), 2),
               "sst2_std": round(statistics.stdev(scores[best]), 2) if len(seeds) > 1 else None,
               "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def report(result: dict) -> str:
    """The Markdown report of one result file (every number from it)."""
    rows = result["rows"]
    cfg = result["run_config"]
    lines = [
        "# Checkpoint probe: when does pre-training start to read word order, and to transfer?",
        "",
        f"Generated by `{result['command']}` from `{result['file']}`; commit {result['commit']}, "
        f"{result['cpu']} (`lscpu` model name), torch {result['torch']}, 1 thread.",
        "",
        f"- run: `bertkit pretrain` preset {cfg['preset']}, objective {cfg['objective']}, {cfg['steps']} steps of "
        f"{cfg['batch_size']} x {cfg['max_seq_length']} tokens, lr {cfg['lr']:g}, warm-up {cfg['warmup']:g}; "
        f"step 0 is the random initialisation of the same shape",
        f"- held-out: the last {cfg.get('valid_documents')} documents of the corpus, the same masks for every row "
        "(`bertkit.mlm_eval.heldout_mlm`); word-order gain = loss on the same sequences with their tokens "
        "shuffled minus the loss in order (nats; 0: the model reads its context as a bag of words)",
        f"- SST-2: fine-tuned on the first {result['train_examples']} training sentences, 2 epochs, batch 32, "
        f"64 tokens; rates {', '.join(f'{x:g}' for x in result['lrs'])} x seeds "
        f"{', '.join(map(str, result['seeds']))}; the rate with the best mean on dev is reported (mean ± std)",
        "",
        "| step | tokens | held-out MLM loss | unigram loss | word-order gain | MLM acc | SST-2 dev acc | rate |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        h = r["heldout"]
        spread = f" ± {r['sst2_std']:.1f}" if r.get("sst2_std") is not None else ""
        lines.append(f"| {r['step']} | {r['tokens'] / 1e6:.1f}M | {h['mlm_loss']:.3f} | {h['unigram_loss']:.3f} | "
                     f"{h['word_order_gain']:.3f} | {100 * h['mlm_accuracy']:.1f} | {r['sst2_mean']:.1f}{spread} | "
                     f"{r['sst2_lr']:g} |")  # fmt: skip
    rand, last = rows[0], rows[-1]
    best = max(rows[1:], key=lambda r: r["sst2_mean"]) if len(rows) > 1 else rand
    gap = best["sst2_mean"] - rand["sst2_mean"]
    spread = max(best.get("sst2_std") or 0, rand.get("sst2_std") or 0)
    lines += [
        "",
        "## Reading",
        "",
        f"- Held-out loss went from {rand['heldout']['mlm_loss']:.3f} (random) to {last['heldout']['mlm_loss']:.3f}"
        f" at step {last['step']}; word frequencies alone score {last['heldout']['unigram_loss']:.3f}.",
        f"- Word order was worth {last['heldout']['word_order_gain']:.3f} nats to the last checkpoint "
        f"(largest: {max(r['heldout']['word_order_gain'] for r in rows[1:]):.3f})."
        if len(rows) > 1
        else "- No checkpoint yet.",
        f"- SST-2: the best checkpoint (step {best['step']}) scores {best['sst2_mean']:.1f} against "
        f"{rand['sst2_mean']:.1f} for random initialisation ({gap:+.1f}; the larger seed spread is {spread:.1f}: "
        f"{'pre-training helps beyond the spread' if gap > spread else 'NOT beyond the spread'}).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a bertkit pretrain run directory with checkpoints/")
    ap.add_argument("--data", required=True, help="the run's bertkit prepare directory")
    ap.add_argument("--glue", required=True, help="the GLUE folder holding SST-2/")
    ap.add_argument("--lrs", default="3e-4,1e-3")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--train-examples", type=int, default=4000)
    ap.add_argument("--out", required=True, help="result JSON to write")
    ap.add_argument("--doc", help="Markdown report to write from the result")
    ap.add_argument("--report-only", action="store_true", help="only regenerate --doc from --out")
    args = ap.parse_args(argv)

    from bertkit.io import atomic_write, atomic_write_json

    out = Path(args.out)
    if args.report_only:
        result = json.loads(out.read_text())
    else:
        import torch

        from bertkit.experiment import machine_info

        torch.set_num_threads(1)
        lrs = [float(x) for x in args.lrs.split(",")]
        seeds = [int(x) for x in args.seeds.split(",")]
        run = Path(args.run)
        with tempfile.TemporaryDirectory() as tmp:
            rows = probe(run, Path(args.data), Path(args.glue), lrs, seeds, args.train_examples, Path(tmp))
        result = {"command": "python experiments/checkpoint_probe.py " + " ".join(sys.argv[1:] if argv is None else argv),
                  "file": str(out), "run_config": json.loads((run / "run_config.json").read_text()),
                  "lrs": lrs, "seeds": seeds, "train_examples": args.train_examples, "rows": rows,
                  **machine_info()}  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out, result)
    if args.doc:
        with atomic_write(Path(args.doc)) as f:
            f.write(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
