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

from lab.experiment import seeds_of, task_models
from lab.report.scores import beats, beyond_spread, fmt, mean_std, metric_name, seed_scores


def average_score(results: dict[str, dict], model: str, tasks: list[str]) -> float | None:
    """The mean over ``tasks`` of ``model``'s seed-mean scores; None until every task has a score."""
    means = [mean_std(seed_scores(results, model, t)) for t in tasks]
    if not tasks or any(m is None for m in means):
        return None
    return statistics.fmean(m[0] for m in means if m is not None)


def planned(raw: dict, task: dict | None, model: str) -> bool:
    """Whether the study fine-tunes ``model`` on ``task`` (its [[task]] entry) at all: a cell outside the plan
    is not "not yet run"."""
    names = task_models(raw, task) if task else []
    return not names or model in names


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
             "tasks has a score, and marked while some of their seeds are missing; — where the study does not "
             "fine-tune the model on the task.", "",
             "| model | " + " | ".join(head) + " |", "| --- |" + " --- |" * len(head)]  # fmt: skip
    by_name = {t["name"]: t for t in matrix.raw.get("task", [])}
    for model in spec["models"]:
        cells = []
        for task in spec["tasks"]:
            if not planned(matrix.raw, by_name.get(task), model):
                cells.append("—")
                continue
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
    pairs = []
    for a, b in spec.get("pairs", []):
        both = [t for t in spec["tasks"] if all(planned(matrix.raw, by_name.get(t), m) for m in (a, b))]
        pairs.append(pair_line(results, a, b, both, [t for t in spec["tasks"] if t not in both]))
    return lines + [""] + (pairs + [""] if pairs else [])


def pair_line(
    results: dict[str, dict], a: str, b: str, tasks: list[str], unplanned: list[str] | tuple = ()
) -> str:
    """One line: ``a`` against ``b`` on the tasks where both have scores: the difference of their averages, and
    on which tasks ``a`` is ahead (or behind) by more than the seeds' spread. ``unplanned``: the table's tasks
    the study does not fine-tune both on, named at the end."""
    outside = f" (not planned for both: {', '.join(unplanned)})" if unplanned else ""
    both = [(t, ma, mb) for t in tasks
            if (ma := mean_std(seed_scores(results, a, t))) and (mb := mean_std(seed_scores(results, b, t)))]  # fmt: skip
    if not both:
        return f"- {a} against {b}: no task has scores for both yet{outside}."
    gap = statistics.fmean(ma[0] - mb[0] for _, ma, mb in both)
    ahead = [t for t, ma, mb in both if beats(ma, mb)]
    behind = [t for t, ma, mb in both if beyond_spread(ma, mb) and not beats(ma, mb)]
    missing = [t for t in tasks if t not in {x[0] for x in both}]
    return (
        f"- {a} against {b}, on the {len(both)} of {len(tasks)} tasks both have: {gap:+.1f} points on average; "
        f"ahead beyond the seeds' spread on {len(ahead)} ({', '.join(ahead) or 'none'}), behind beyond it on "
        f"{len(behind)} ({', '.join(behind) or 'none'})"
        + (f"; not both run yet: {', '.join(missing)}" if missing else "")
        + f"{outside}."
    )


__all__ = ["average_score", "pair_line", "summary_table"]
