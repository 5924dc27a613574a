"""What keeping freed memory in the process (bertkit.kernels.freed_memory, on in bertkit's Trainer) costs and
buys: seconds per training step and resident memory, with glibc's default malloc and with the setting, each
case in a fresh process (the setting is process-wide).

    .venv/bin/python -m benchmarks.bench_freed_memory [--threads 2] [--out docs/perf/freed-memory.json]

Cases: the pre-training step of benchmarks.bench_pretrain (fixed 32 x 128 batches, BERT-small and BERT-base),
and BERT-mini sequence classification on batches of 32 random lengths up to 64 (packed activations come in
varying shapes: the case that once grew the heap, lab/notes/notes-perf.md). Reported: the median seconds per step
after the first third of the steps, resident memory (MB) sampled through the run, and minor page faults per
step.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"pretrain-small": 12, "pretrain-base": 5, "classify-mini-varying": 300}  # case -> steps


def _stepper(case: str):
    import torch

    from bertkit.config import BertConfig
    from bertkit.train.optim import build_optimizer

    if case.startswith("pretrain-"):
        from benchmarks.bench_pretrain import _step, make_batch
        from bertkit.heads.pretraining import BertForPreTraining

        torch.manual_seed(0)
        cfg = BertConfig.preset(case.split("-", 1)[1])
        model = BertForPreTraining(cfg).train()
        opt = build_optimizer(model, "adamw", lr=1e-4)
        batch = make_batch(cfg.vocab_size, 32, 128)
        return lambda: _step(model, opt, batch)
    from bertkit.heads.finetune import BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig.preset("mini", num_labels=2)
    model = BertForSequenceClassification(cfg).train()
    opt = build_optimizer(model, "adamw", lr=1e-4)
    gen = torch.Generator().manual_seed(0)

    def step():
        lengths = torch.randint(5, 65, (32,), generator=gen)
        mask = (torch.arange(64)[None] < lengths[:, None]).long()
        ids = torch.randint(5, cfg.vocab_size, (32, 64), generator=gen) * mask
        model(
            input_ids=ids, attention_mask=mask, labels=torch.randint(0, 2, (32,), generator=gen)
        ).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def measure(case: str, keep: bool, threads: int | None) -> dict:
    """One case in this process (call it in a fresh one: see the module docstring)."""
    import torch

    from benchmarks.common import rss_bytes

    if threads:
        torch.set_num_threads(threads)
    applied = False
    if keep:
        from bertkit.kernels.freed_memory import keep_freed_memory

        applied = keep_freed_memory()
    step, steps = _stepper(case), CASES[case]
    times, rss = [], []
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if i % max(1, steps // 6) == 0 or i == steps - 1:
            rss.append(rss_bytes() >> 20)
    steady = sorted(times[steps // 3 :])
    return {"case": case, "freed_memory_kept": applied, "steps": steps, "threads": torch.get_num_threads(),
            "s_per_step": round(steady[len(steady) // 2], 4), "rss_mb": rss,
            "minor_faults_per_step": round((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / steps)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--out", default=None, help="write the results (and machine, command, commit) as JSON here"
    )
    p.add_argument("--case", choices=sorted(CASES), default=None, help=argparse.SUPPRESS)  # the child process
    p.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(measure(args.case, args.keep, args.threads)), flush=True)
        return
    from benchmarks.common import child_json, environment
    from bertkit.io import atomic_write_json

    rows = []
    for case in CASES:
        for keep in (False, True):  # each in a fresh process, glibc's malloc as the environment leaves it
            child = ["-m", "benchmarks.bench_freed_memory", "--case", case]
            child += (["--keep"] if keep else []) + (["--threads", str(args.threads)] if args.threads else [])
            rows.append(child_json(child, drop_env=("BERTKIT_KEEP_FREED_MEMORY", "MALLOC_*")))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        command = "python -m benchmarks.bench_freed_memory " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        atomic_write_json(args.out, {"environment": environment(), "command": command, "results": rows})


if __name__ == "__main__":
    main()
