"""Run finished cells of a matrix again on this machine and compare with their committed results: are the
scores the same (same code, another host: the same bits, or rounding that grew), and how does the change
compare with the seeds' spread of that model and task?

``.venv/bin/python -m benchmarks.repro_check experiments/plateau.toml --only 'finetune/random-tiny/*-full/seed2'
--out docs/perf/repro-check.json [--run-folder runs/plateau]``

The committed results are copied to a temporary folder first, so they stay as they are; the cells' inputs
(vocabulary, data, models) are taken from, or built into, ``--run-folder`` as the runner does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from bertkit.io import atomic_write_json
from bertkit.kernels.peak import per_core_gflops
from lab.experiment import load_matrix, machine_info, read_results, results_dir, run_matrix

KEPT = ("primary", "cpu_s", "commit", "cpu", "cpu_generation", "gemm_gflops_per_core", "threads", "finished")


def _seed_spread(results: dict[str, dict], cell: str) -> float | None:
    """The sample std of the primary score over the seed cells of ``cell``'s model and task, if 2 or more."""
    stem = cell.rsplit("/seed", 1)[0] + "/seed"
    scores = [r["primary"] for n, r in results.items() if n.startswith(stem) and r.get("primary") is not None]
    return round(statistics.stdev(scores), 3) if len(scores) > 1 else None


def check(config: str, only: str, run_folder: str | None = None) -> dict:
    matrix = load_matrix(config)
    committed = read_results(results_dir(matrix))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "results"
        shutil.copytree(results_dir(matrix), copy)
        summary = run_matrix(config, out=run_folder, results=copy, only=only, rerun=only, progress=False)
        again = read_results(copy)
    rows = []
    for name in summary["rerun"]:
        before, now = committed[name], again.get(name, {})
        row = {
            "cell": name,
            "committed": {k: before.get(k) for k in KEPT},
            "now": {k: now.get(k) for k in KEPT},
        }
        if before.get("primary") is not None and now.get("primary") is not None:
            row["same_score"] = before["primary"] == now["primary"]
            row["score_change"] = round(now["primary"] - before["primary"], 3)
            row["seeds_std"] = _seed_spread(committed, name)
        if before.get("cpu_s") and now.get("cpu_s"):
            row["cpu_s_ratio"] = round(now["cpu_s"] / before["cpu_s"], 2)
        rows.append(row)
    return {"config": config, "only": only, "machine": {**machine_info(), "gemm_gflops_per_core": round(
        per_core_gflops(), 1)}, "cells": rows}  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config")
    p.add_argument(
        "--only", required=True, help="the finished cells to run again (the runner's --only syntax)"
    )
    p.add_argument(
        "--run-folder", dest="run_folder", default=None, help="the runner's --out (default runs/NAME)"
    )
    p.add_argument("--out", help="write the comparison here (JSON)")
    args = p.parse_args(argv)
    out = check(args.config, args.only, args.run_folder)
    print(json.dumps(out, indent=1))
    if args.out:
        atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
