"""The report's ``[summary]`` table: one row per model, one column per task (mean over seeds), and the
average of the tasks a decision rule names, computed here rather than by hand in a note.

    [summary]
    models = ["a", "b"]                           # the rows, in this order
    tasks = ["SST-2", "STS-B", "MRPC", "CoLA"]    # the columns
    average = ["SST-2", "STS-B", "MRPC", "CoLA"]  # averaged per model; blank until all of them have seeds in
    pairs = [["a", "b"]]                          # a line each: a against b on every task of the table
"""

from __future__ import annotations

import statistics
from typing import Any

from bertkit.errors import UserError
from lab.experiment import seeds_of
from lab.report.scores import beats, beyond_spread, fmt, mean_std, metric_name, seed_scores


def check_summary(spec: Any, tasks: set[str], models: set[str], where: str) -> None:
    """UserError naming ``where`` (the config) unless ``spec`` is a table of known models and tasks."""
    if not isinstance(spec, dict):
        raise UserError(f"{where}: [summary] must be a table with models, tasks and average")
    unknown = set(spec) - {"models", "tasks", "average", "pairs"}
    if unknown:
        raise UserError(
            f"{where}: [summary] has unknown keys {sorted(unknown)} (it takes models, tasks, average, pairs)"
        )
    pairs = spec.get("pairs", [])
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(m in models for m in p) for p in pairs
    ):
        raise UserError(f"{where}: [summary] pairs must be a list of [model, model] of the config's models")
    for key, known in (("models", models), ("tasks", tasks), ("average", tasks)):
        names = spec.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UserError(f"{where}: [summary] {key} must be a list of names")
        missing = [n for n in names if n not in known]
        if missing:
            raise UserError(f"{where}: [summary] {key} names {missing}, which the config does not define")
    if not spec.get("models") or not spec.get("tasks"):
        raise UserError(f"{where}: [summary] needs models and tasks")


def average_score(results: dict[str, dict], model: str, tasks: list[str]) -> float | None:
    """The mean over ``tasks`` of ``model``'s seed-mean scores; None until every task has a score."""
    means = [mean_std(seed_scores(results, model, t)) for t in tasks]
    if not tasks or any(m is None for m in means):
        return None
    return statistics.fmean(m[0] for m in means if m is not None)


def summary_table(matrix: Any, results: dict[str, dict]) -> list[str]:
    """The ``[summary]`` section's lines (empty without one): mean ± std per model and task, and the average."""
    spec = matrix.raw.get("summary")
    if not spec:
        return []
    average = spec.get("average", [])
    head = [f"{t} ({metric_name(matrix, t, 'primary')})" for t in spec["tasks"]]
    if average:
        head.append(f"average of {', '.join(average)}")
    lines = ["## Summary", "",
             "Dev-set scores, mean ± std over seeds; the average is of the seed means, blank until each of its "
             "tasks has a score, and marked while some of their seeds are missing.", "",
             "| model | " + " | ".join(head) + " |", "| --- |" + " --- |" * len(head)]  # fmt: skip
    by_name = {t["name"]: t for t in matrix.raw.get("task", [])}
    for model in spec["models"]:
        cells = []
        for task in spec["tasks"]:
            xs = seed_scores(results, model, task)
            cells.append(fmt(mean_std(xs), len(xs), len(seeds_of(matrix.raw, by_name.get(task)))))
        if average:
            avg = average_score(results, model, average)
            partial = any(
                len(seed_scores(results, model, t)) < len(seeds_of(matrix.raw, by_name.get(t)))
                for t in average
            )
            cells.append("" if avg is None else f"{avg:.1f}" + (" (seeds missing)" if partial else ""))
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    pairs = [pair_line(results, a, b, spec["tasks"]) for a, b in spec.get("pairs", [])]
    return lines + [""] + (pairs + [""] if pairs else [])


def pair_line(results: dict[str, dict], a: str, b: str, tasks: list[str]) -> str:
    """One line: ``a`` against ``b`` on the tasks where both have scores: the difference of their averages, and
    on which tasks ``a`` is ahead (or behind) by more than the seeds' spread."""
    both = [(t, ma, mb) for t in tasks
            if (ma := mean_std(seed_scores(results, a, t))) and (mb := mean_std(seed_scores(results, b, t)))]  # fmt: skip
    if not both:
        return f"- {a} against {b}: no task has scores for both yet."
    gap = statistics.fmean(ma[0] - mb[0] for _, ma, mb in both)
    ahead = [t for t, ma, mb in both if beats(ma, mb)]
    behind = [t for t, ma, mb in both if beyond_spread(ma, mb) and not beats(ma, mb)]
    missing = [t for t in tasks if t not in {x[0] for x in both}]
    return (
        f"- {a} against {b}, on the {len(both)} of {len(tasks)} tasks both have: {gap:+.1f} points on average; "
        f"ahead beyond the seeds' spread on {len(ahead)} ({', '.join(ahead) or 'none'}), behind beyond it on "
        f"{len(behind)} ({', '.join(behind) or 'none'})"
        + (f"; not both run yet: {', '.join(missing)}." if missing else ".")
    )


__all__ = ["average_score", "check_summary", "pair_line", "summary_table"]
