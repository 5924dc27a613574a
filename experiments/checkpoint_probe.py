"""Follow one pre-training run through its checkpoints: when does BERT start reading word order, and when
does its pre-training start to transfer?

    bertkit pretrain --data DATA --preset tiny --objective mlm --steps 20000 --checkpoint-every 2000 \\
        --keep-last 100 --valid-documents 100 --out RUN
    python experiments/checkpoint_probe.py RUN --data DATA --glue ../shared/data/glue \\
        --out experiments/results/checkpoint-probe/tiny-mlm.json
    python experiments/checkpoint_probe.py --report docs/results/checkpoint-probe.md \\
        --results experiments/results/checkpoint-probe/*.json

For every checkpoint of RUN (and the random initialisation of the same shape, as step 0) it writes:

- the held-out masked-LM scores of :func:`lab.mlm_eval.heldout_mlm` (the same masks for every model),
  with the unigram loss and the *word-order gain* (loss on the same sequences shuffled minus the loss in
  order: 0 for a model that reads its context as a bag of words);
- SST-2 dev accuracy after fine-tuning on the first ``--train-examples`` training sentences, for each rate
  of ``--lrs`` and each seed of ``--seeds`` (the paper's practice: the rate is picked on dev by the mean
  over seeds; mean and sample std of that rate are reported).

One JSON file per run (every row, the command, commit, CPU, torch); ``--report`` makes a Markdown report and a
PNG from any number of them. One thread; CPU seconds are recorded beside wall time because the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def model_dir_at(run: Path, data: Path, ckpt: Path | None, work: Path) -> Path:
    """A Hugging Face layout model dir of ``run``'s model at ``ckpt`` (None: the random initialisation)."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.pretrain import save_tokenizer
    from bertkit.train.checkpoint import load_checkpoint

    cfg = json.loads((run / "run_config.json").read_text())
    vocab = data / "vocab.txt"
    mc = BertConfig.preset(cfg["preset"], vocab_size=len(vocab.read_text(encoding="utf-8").splitlines()),
                           **cfg.get("model_overrides", {}))  # fmt: skip
    state = torch.random.get_rng_state()
    torch.manual_seed(int(cfg.get("seed", 0)))  # the initialisation draws from torch's generator
    model = BertForPreTraining(mc)
    torch.random.set_rng_state(state)
    if ckpt is not None:  # the trainer's own reader: tensors only, a foreign or damaged file is refused
        model.load_state_dict(load_checkpoint(ckpt)["model"])
    out = work / (ckpt.stem if ckpt else "random")
    model.save_pretrained(out)
    save_tokenizer(vocab, True, out)
    return out


def sst2(model_dir: Path, task, work: Path, lr: float, seed: int, n: int) -> float:
    """SST-2 dev accuracy (percent) after fine-tuning ``model_dir`` on the first ``n`` training sentences of
    ``task`` (a :class:`bertkit.tasks.spec.TaskData`, read once per probe)."""
    import torch

    from bertkit.tasks.finetune import finetune
    from bertkit.tasks.spec import Settings

    torch.manual_seed(seed)
    s = Settings(epochs=2, batch_size=32, lr=lr, max_seq_length=64, seed=seed, max_train_examples=n,
                 progress=False)  # fmt: skip
    r = finetune(task, model_dir, work / f"sst2-{lr:g}-{seed}", s)
    return round(100 * r["metrics"]["accuracy"], 2)


def probe(
    run: Path, data: Path, glue: Path, lrs: list[float], seeds: list[int], n: int, work: Path
) -> list[dict]:
    from bertkit.tasks.glue import glue_task_data
    from bertkit.train.checkpoint import list_checkpoints
    from lab.mlm_eval import heldout_mlm

    task = glue_task_data("SST-2", glue / "SST-2")
    cfg = json.loads((run / "run_config.json").read_text())
    tokens_per_step = int(cfg["batch_size"]) * int(cfg["grad_accum"]) * int(cfg["max_seq_length"])
    rows = []
    for step, ckpt in [(0, None), *list_checkpoints(run)]:
        t0, c0 = time.time(), time.process_time()
        model_dir = model_dir_at(run, data, ckpt, work)
        held = heldout_mlm(model_dir, data, int(cfg["max_seq_length"]), cfg.get("valid_documents"))
        scores = {lr: [sst2(model_dir, task, work / model_dir.name, lr, s, n) for s in seeds] for lr in lrs}
        best = max(lrs, key=lambda lr: statistics.mean(scores[lr]))
        row = {"step": step, "tokens": step * tokens_per_step, "heldout": held,
               "sst2": {f"{lr:g}": v for lr, v in scores.items()}, "sst2_lr": best,
               "sst2_mean": round(statistics.mean(scores[best]), 2),
               "sst2_std": round(statistics.stdev(scores[best]), 2) if len(seeds) > 1 else None,
               "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def report(results: list[dict], doc: Path, files: list[str]) -> str:
    """The Markdown report of the result ``files`` (loaded: ``results``; every number from them), and
    ``<doc stem>.png`` beside it."""
    lines = [
        "# Checkpoint probe: when does pre-training start to read word order, and to transfer?",
        "",
        f"Generated by `python experiments/checkpoint_probe.py --report {doc} --results {' '.join(files)}` "
        "(never typed).",
        "",
        "Each run below is one `bertkit pretrain` run followed through its checkpoints by "
        "`experiments/checkpoint_probe.py`; step 0 is the random initialisation of the same shape. Held-out: the "
        "last documents of the corpus, the same masks for every row of a run (`lab.mlm_eval.heldout_mlm`). "
        "Word-order gain: the held-out loss on the same sequences with their tokens shuffled minus the loss in "
        "order, in nats (0: the model reads its context as a bag of words). SST-2: fine-tuned on the first "
        "training sentences, 2 epochs, batch 32, 64 tokens, each rate x seed; the rate with the best dev mean "
        "is reported (mean ± std over seeds).",
        "",
        f"![held-out loss, word-order gain and SST-2 against pre-training tokens]({doc.stem}.png)",
        "",
    ]
    for result in results:
        rows, cfg = result["rows"], result["run_config"]
        lines += [
            f"## {_label(result)}",
            "",
            f"- pre-training: `bertkit pretrain` preset {cfg['preset']}, objective {cfg['objective']}, "
            f"{cfg['steps']} steps of {cfg['batch_size']} x {cfg['max_seq_length']} tokens, lr {cfg['lr']:g}, "
            f"warm-up {cfg['warmup']:g}, masked {cfg['masked_lm_prob']:g} (at most "
            f"{cfg['max_predictions_per_seq']} per sequence), dropout "
            f"{cfg.get('model_overrides', {}).get('hidden_dropout_prob', 0.1):g}, seed {cfg['seed']}",
            f"- pre-training command: {_pretrain_command(cfg)}",
            f"- probe: `{result['command']}`; commit {result['commit']}, {result['cpu']} (`lscpu` model name), "
            f"torch {result['torch']}, 1 thread; SST-2 on {result['train_examples']} sentences, rates "
            f"{', '.join(f'{x:g}' for x in result['lrs'])}, seeds {', '.join(map(str, result['seeds']))}",
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
        lines += ["", *_reading(rows, cfg), ""]
    _plot(results, doc.with_suffix(".png"))
    return "\n".join(lines)


def _pretrain_command(cfg: dict) -> str:
    """The ``bertkit pretrain`` command line of a run, from its run_config.json."""
    flags = ["--preset", cfg["preset"], "--objective", cfg["objective"], "--steps", cfg["steps"], "--batch-size",
             cfg["batch_size"], "--max-seq-length", cfg["max_seq_length"], "--lr", f"{cfg['lr']:g}", "--warmup",
             f"{cfg['warmup']:g}", "--masked-lm-prob", f"{cfg['masked_lm_prob']:g}", "--max-predictions-per-seq",
             cfg["max_predictions_per_seq"], "--seed", cfg["seed"], "--valid-documents", cfg.get("valid_documents"),
             "--checkpoint-every", cfg["checkpoint_every"], "--keep-last", cfg["keep_last"], "--num-threads", 1]  # fmt: skip
    line = "`bertkit pretrain --data DATA --out RUN " + " ".join(str(f) for f in flags)
    overrides = cfg.get("model_overrides") or {}
    if overrides:
        table = ", ".join(f"{k} = {v}" for k, v in sorted(overrides.items()))
        return line + f" --config FILE` (FILE: a `[model]` table with {table})"
    return line + "`"


def _label(result: dict) -> str:
    cfg = result["run_config"]
    drop = cfg.get("model_overrides", {}).get("hidden_dropout_prob", 0.1)
    return (f"{cfg['preset']}, {cfg['objective']}, {cfg['batch_size']} x {cfg['max_seq_length']}, "
            f"{100 * cfg['masked_lm_prob']:g}% masked, dropout {drop:g}, {cfg['steps']} steps planned")  # fmt: skip


def _reading(rows: list[dict], cfg: dict) -> list[str]:
    """What the table says, computed from it."""
    rand, trained = rows[0], rows[1:]
    if not trained:
        return ["- No checkpoint yet."]
    last = trained[-1]
    best = max(trained, key=lambda r: r["sst2_mean"])
    gap = best["sst2_mean"] - rand["sst2_mean"]
    spread = max(best.get("sst2_std") or 0, rand.get("sst2_std") or 0)
    first_order = next((r for r in trained if r["heldout"]["word_order_gain"] >= 0.1), None)
    planned = cfg["steps"]
    stopped = (f" (the last checkpoint: the run was stopped there, {planned} steps planned, so its learning rate"
               " had not decayed)" if last["step"] < planned else "")  # fmt: skip
    return [
        f"- Held-out loss: {rand['heldout']['mlm_loss']:.3f} (random) -> {last['heldout']['mlm_loss']:.3f} at step "
        f"{last['step']}{stopped}; word frequencies alone: {last['heldout']['unigram_loss']:.3f}.",
        f"- Word order: worth {last['heldout']['word_order_gain']:.3f} nats at step {last['step']}; "
        + (f"first >= 0.1 at step {first_order['step']} ({first_order['tokens'] / 1e6:.1f}M tokens)."
           if first_order else "never >= 0.1: the model still reads its context as a bag of words."),
        f"- SST-2: best checkpoint (step {best['step']}) {best['sst2_mean']:.1f} against {rand['sst2_mean']:.1f} for "
        f"random initialisation ({gap:+.1f}; larger seed spread {spread:.1f}: "
        f"{'beyond the spread' if gap > spread else 'NOT beyond the spread'}).",
    ]  # fmt: skip


def _plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bertkit.io import atomic_write

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for result in results:
        rows = result["rows"]
        toks = [r["tokens"] / 1e6 for r in rows]
        label = _label(result)
        axes[0].plot(toks, [r["heldout"]["mlm_loss"] for r in rows], marker="o", label=label)
        axes[1].plot(toks, [r["heldout"]["word_order_gain"] for r in rows], marker="o", label=label)
        axes[2].errorbar(toks, [r["sst2_mean"] for r in rows], yerr=[r.get("sst2_std") or 0 for r in rows],
                         marker="o", capsize=3, label=label)  # fmt: skip
    for ax, title in zip(
        axes, ("held-out MLM loss (nats)", "word-order gain (nats)", "SST-2 dev accuracy (%)")
    ):
        ax.set_xlabel("pre-training tokens (millions; 0 = random init)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_write(path, mode="wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", help="a bertkit pretrain run directory with checkpoints/")
    ap.add_argument("--data", help="the run's bertkit prepare directory")
    ap.add_argument("--glue", help="the GLUE folder holding SST-2/")
    ap.add_argument("--lrs", default="3e-4,1e-3")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--train-examples", type=int, default=4000)
    ap.add_argument("--out", help="result JSON to write")
    ap.add_argument("--report", help="write this Markdown report (and its PNG) from the --results files")
    ap.add_argument("--results", nargs="*", default=[], help="result JSON files for --report")
    args = ap.parse_args(argv)

    from bertkit.io import atomic_write, atomic_write_json

    if args.report:
        results = [json.loads(Path(f).read_text()) for f in args.results]
        text = report(results, Path(args.report), args.results)
        with atomic_write(Path(args.report)) as f:
            f.write(text)
        return 0
    if not (args.run and args.data and args.glue and args.out):
        ap.error("a probe needs RUN, --data, --glue and --out (or --report DOC --results FILE...)")
    import torch

    from lab.experiment import machine_info

    torch.set_num_threads(1)
    lrs = [float(x) for x in args.lrs.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    run, out = Path(args.run), Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        rows = probe(run, Path(args.data), Path(args.glue), lrs, seeds, args.train_examples, Path(tmp))
    result = {"command": "python experiments/checkpoint_probe.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "run_config": json.loads((run / "run_config.json").read_text()), "lrs": lrs, "seeds": seeds,
              "train_examples": args.train_examples, "rows": rows, **machine_info()}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
