"""OpenMP's wait policy on this machine: the MiniLM encoder rows (SST-2 batches; fp32, and bf16 where the CPU
has native bf16) of ``benchmarks.bench_encoder``, bertkit against transformers, once per policy, each in a
fresh process (the policy is read when torch starts its OpenMP pool, so it cannot change within one).

    .venv/bin/python -m benchmarks.bench_wait_policy [--threads 2] [--out docs/perf/wait-policy.json]

Policies: ``PASSIVE`` (idle threads sleep at once), ``ACTIVE`` (they spin) and OpenMP's default (spin a
while, then sleep; what the ``bertkit`` command leaves on a machine that is not saturated). What it chooses
and why: ``bertkit.tuning.omp_wait_policy``. Each row also carries each side's share of its CPU time
spent in the kernel: a sleeping thread's wake-up is a system call, and a model made of many small parallel
regions pays it per region.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, os, sys
import benchmarks  # noqa: F401  (decides OMP_WAIT_POLICY where unset, as the `bertkit` command does)
from benchmarks.common import bf16_supported, pin_threads
from benchmarks import bench_encoder

pin_threads({threads})
rows = []
for precision in ["fp32"] + (["bf16"] if bf16_supported() else []):
    r = bench_encoder.bench("minilm", "sst2", 8, 5, precision=precision)
    rows.append({{k: r[k] for k in ("name", "ours_per_s", "ref_per_s", "ratio", "ours_kernel_share",
                                  "ref_kernel_share", "check")}})
print("RESULT " + json.dumps({{"effective": os.environ.get("OMP_WAIT_POLICY", "(default)"), "rows": rows}}))
"""


def measure(policy: str | None, threads: int) -> dict:
    """The encoder rows in a fresh process with ``OMP_WAIT_POLICY=policy`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(threads=threads)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return {"policy": policy or "(default)"} | json.loads(line[len("RESULT ") :])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from .common import environment

    results = [measure(policy, args.threads) for policy in ("PASSIVE", None, "ACTIVE")]
    for res in results:
        for r in res["rows"]:
            print(
                f"{res['policy']:>9} (in effect: {res['effective']}): {r['name']}: ours {r['ours_per_s']:.1f} "
                f"seq/s, ref {r['ref_per_s']:.1f} seq/s, ratio {r['ratio']:.2f}, kernel share "
                f"{r['ours_kernel_share']:.1%} / {r['ref_kernel_share']:.1%}",
                flush=True,
            )
    if args.out:
        from bertkit.io import atomic_write_json

        atomic_write_json(
            args.out,
            {
                "environment": environment() | {"threads": args.threads},
                "command": "python -m benchmarks.bench_wait_policy " + " ".join(argv or sys.argv[1:]),
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
