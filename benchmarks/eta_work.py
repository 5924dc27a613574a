"""How well the matrix ETA's work estimates predict CPU time: for each task of a matrix, the median of
estimated FLOPs per CPU-second over its finished cells, under the plan's estimate (reads no data) and under
:mod:`lab.experiment.work` (counts the task's data). One rate for every task needs these to agree.

``.venv/bin/python -m benchmarks.eta_work experiments/plateau.toml [--out docs/perf/eta-work.json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

from bertkit.io import atomic_write_json
from lab.experiment import load_matrix, read_results, results_dir
from lab.experiment.work import data_costs


def rates(config: str) -> dict:
    matrix = load_matrix(config)
    plan = {c.name: c.cost for c in matrix.cells}
    counted = data_costs(matrix)
    by_task: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"plan": [], "data": []})
    for name, r in read_results(results_dir(matrix, None)).items():
        if name not in counted or r.get("skipped") or not r.get("cpu_s"):
            continue
        by_task[r["task"]]["data"].append(counted[name] / r["cpu_s"] / 1e9)
        if plan.get(name):
            by_task[r["task"]]["plan"].append(plan[name] / r["cpu_s"] / 1e9)
    tasks = {t: {"cells": len(v["data"]), "plan_gflop_per_cpu_s": round(statistics.median(v["plan"]), 2),
                 "data_gflop_per_cpu_s": round(statistics.median(v["data"]), 2)} for t, v in sorted(by_task.items())}  # fmt: skip

    def spread(key: str) -> float:
        xs = [v[key] for v in tasks.values()]
        return round(max(xs) / min(xs), 1)

    return {"config": config, "tasks": tasks, "spread_plan": spread("plan_gflop_per_cpu_s"),
            "spread_data": spread("data_gflop_per_cpu_s")}  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config")
    p.add_argument("--out")
    args = p.parse_args(argv)
    out = rates(args.config)
    print(json.dumps(out, indent=1))
    if args.out:
        atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
