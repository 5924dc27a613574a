"""CPU-seconds per pre-training step of one recipe at each precision: what a token costs, which is what a
CPU-hour budget buys (the pre-training study sizes its links from this).

``.venv/bin/python -m benchmarks.step_cost --data PREPARED --model-config experiments/configs/modernbert-mini.json
--objective electra --precisions fp32 bf16 --threads 2 --out docs/perf/step-cost-....json``

Each precision trains the same run from the same seed for ``--steps`` steps (batch 32 x 128 by default, the study's
recipe: AdamW, lr 5e-4, 6% warm-up) and reports the process CPU time and wall time per step from step 10 to
the last (the first steps pay for allocation and the per-machine choices), with the loss every 10 steps: the
two precisions' losses side by side are the check that bf16 trains the same model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import environment, pin_threads
from bertkit.io import atomic_write_json

FIRST_TIMED_STEP = 10


def step_cost(data: str, model_config: str | None, preset: str, objective: str, precision: str, steps: int,
              threads: int, batch_size: int = 32, max_seq_length: int = 128) -> dict[str, Any]:  # fmt: skip
    """Train ``steps`` steps at ``precision``; CPU and wall seconds per step after the first 10, and the
    loss every 10 steps."""
    from bertkit.pretrain import PretrainConfig, pretrain

    marks: list[tuple[int, float, float, float]] = []

    def clock(rec: dict) -> None:
        marks.append((int(rec["step"]), time.process_time(), time.perf_counter(), float(rec["loss"])))

    with tempfile.TemporaryDirectory() as out:
        cfg = PretrainConfig(
            data=data, out=out, model_config=model_config, preset=preset, objective=objective, steps=steps,
            batch_size=batch_size, max_seq_length=max_seq_length, lr=5e-4, warmup=0.06, precision=precision, log_every=FIRST_TIMED_STEP,
            eval_batches=0, checkpoint_every=0, progress=False, seed=0, num_threads=threads,
        ).with_recipe()  # fmt: skip
        pretrain(cfg, callbacks=[clock])
    (s0, c0, w0, _), (s1, c1, w1, _) = marks[0], marks[-1]
    return {
        "precision": precision,
        "steps_timed": s1 - s0,
        "cpu_s_per_step": round((c1 - c0) / (s1 - s0), 4),
        "wall_s_per_step": round((w1 - w0) / (s1 - s0), 4),
        "loss_every_10_steps": [round(m[3], 4) for m in marks],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a prepared data folder (bertkit prepare)")
    p.add_argument("--model-config", default=None, help="a config.json (e.g. a ModernBERT one)")
    p.add_argument("--preset", default="mini")
    p.add_argument("--objective", default="electra")
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    threads = pin_threads(args.threads)
    rows = [step_cost(args.data, args.model_config, args.preset, args.objective, prec, args.steps, threads,
                      args.batch_size, args.max_seq_length) for prec in args.precisions]  # fmt: skip
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "loss_every_10_steps"}))
    command = "python -m benchmarks.step_cost " + " ".join(argv if argv is not None else sys.argv[1:])
    atomic_write_json(Path(args.out), {"environment": environment(), "command": command,
                                       "model_config": args.model_config, "objective": args.objective, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
