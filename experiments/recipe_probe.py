"""One short pre-training probe for the small-preset recipe: held-out loss after a fixed number of steps,
and the process CPU seconds it took (CPU, not wall-clock: the machine is shared).

    python experiments/recipe_probe.py --data DATA_DIR --preset tiny --lr 1e-3 --warmup 0.06 \\
        --batch-size 32 --seq 128 --steps 300 --results experiments/results/recipe

Writes one JSON per probe into ``--results`` (settings, ``cpu_s``, ``tokens``, held-out ``eval_loss`` /
``eval_acc`` from bertkit pretrain's own evaluation, commit, CPU model). docs/results/paper.md's "Recipe" table is
generated from these files. One thread, MLM objective, masks as in pre-training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--warmup", type=float, default=0.06)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--no-dropout", action="store_true")
    ap.add_argument("--results", required=True)
    ap.add_argument("--work", default="runs/recipe-probe")
    args = ap.parse_args(argv)

    import torch

    from bertkit.pretrain import PretrainConfig, pretrain
    from lab.experiment import machine_info

    torch.set_num_threads(1)
    extra = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0} if args.no_dropout else {}
    name = f"{args.preset}-lr{args.lr:g}-w{args.warmup:g}-b{args.batch_size}-s{args.seq}-{args.steps}{'-nodrop' if extra else ''}"
    work = Path(args.work) / name
    shutil.rmtree(work, ignore_errors=True)
    cfg = PretrainConfig(
        data=args.data, out=str(work), preset=args.preset, objective="mlm", steps=args.steps,
        batch_size=args.batch_size, max_seq_length=args.seq, lr=args.lr, warmup=args.warmup,
        eval_batches=20, eval_batch_size=64, log_every=10, checkpoint_every=100000, progress=False,
        max_predictions_per_seq=max(1, round(args.seq * 0.15) + 1), model_overrides=extra,
    )  # fmt: skip
    t0, w0 = time.process_time(), time.time()
    r = pretrain(cfg)
    row = {"probe": name, "preset": args.preset, "lr": args.lr, "warmup": args.warmup, "batch_size": args.batch_size,
           "seq": args.seq, "steps": args.steps, "dropout": not extra, "tokens": args.steps * args.batch_size * args.seq,
           "cpu_s": round(time.process_time() - t0, 1), "wall_s": round(time.time() - w0, 1),
           "eval_loss": round(r["eval"]["loss"], 3), "eval_acc": round(r["eval"].get("masked_lm_accuracy", 0), 4),
           "command": "python experiments/recipe_probe.py " + " ".join(sys.argv[1:] if argv is None else argv),
           **machine_info()}  # fmt: skip
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
