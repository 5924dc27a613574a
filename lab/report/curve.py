"""Quality per CPU-hour: downstream scores of pre-trained models against the CPU-hours their pre-training took
(a ``[curve]`` table in the matrix), with published anchors drawn as lines and the points' numbers on them.

    [curve]
    models = ["electra-mini-1h", "electra-mini-2h", ...]   # a chain of continue_from links, or any models
    tasks = ["SST-2", "STS-B"]
    anchors = { "SST-2" = { "BERT-Tiny (Google, test)" = 83.2 } }
    start = "random-mini"                # optional: the chain's random init, drawn at 0 CPU-hours
    beside = ["electra-mini-3h"]         # optional: models of one schedule each, drawn apart from the chain

A model's x is the CPU-hours of its whole chain (its own ``train_cpu_s`` plus the links it continues), its y
the mean over seeds of the task's primary score, with the seeds' spread as an error bar. The ``beside`` models
answer "what would one schedule of that many CPU-hours have given": each link of a chain warms up and decays
its learning rate afresh.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic_write
from lab.report.scores import mean_std, seed_scores

CURVE_KEYS = {"models", "tasks", "anchors", "start", "beside"}
KIND = {"models": "chain", "start": "random init", "beside": "one schedule"}


def chain_cpu_hours(results: dict[str, dict], model: str) -> float | None:
    """CPU-hours of ``model``'s pre-training with every link it continues (None if a link has no result)."""
    total, name = 0.0, model
    while name:
        r = results.get(f"pretrain/{name}")
        if r is None or r.get("train_cpu_s") is None:
            return None
        total += float(r["train_cpu_s"])
        name = r.get("continued_from")
    return total / 3600.0


def curve_points(
    results: dict[str, dict], spec: dict[str, Any]
) -> dict[str, list[tuple[str, float, tuple, str]]]:
    """task -> [(model, CPU-hours, (mean, std), kind), ...] for the models with both a pre-training and scores,
    in CPU order; kind is "chain" (``models``), "random init" (``start``, at 0 CPU-hours) or "one schedule"
    (``beside``)."""
    unknown = sorted(set(spec) - CURVE_KEYS)
    if unknown:
        raise UserError(
            f"[curve]: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(CURVE_KEYS))})"
        )
    members = [(m, "models") for m in spec.get("models", [])] + [
        (m, "beside") for m in spec.get("beside", [])
    ]
    if spec.get("start"):
        members.insert(0, (spec["start"], "start"))
    out: dict[str, list[tuple[str, float, tuple, str]]] = {}
    for task in spec.get("tasks", []):
        pts = []
        for model, role in members:
            hours = 0.0 if role == "start" else chain_cpu_hours(results, model)
            ms = mean_std(seed_scores(results, model, task))
            if hours is not None and ms is not None:
                pts.append((model, hours, ms, KIND[role]))
        out[task] = sorted(pts, key=lambda p: p[1])
    return out


def quality_curve(matrix: Any, results: dict[str, dict], doc: Path) -> list[str]:
    """The report's section for ``[curve]``: a table of the points and ``<doc stem>-curve.png`` beside the
    page (written when at least one point exists). Empty when the matrix has no ``[curve]``."""
    spec = matrix.raw.get("curve")
    if not spec:
        return []
    points = curve_points(results, spec)
    lines = ["## Quality per CPU-hour", ""]
    if not any(points.values()):
        return lines + ["No point yet: the models of the curve have no fine-tuning results.", ""]
    png = doc.parent / f"{doc.stem}-curve.png"
    _plot(points, spec.get("anchors") or {}, png)
    lines += [f"![quality per CPU-hour]({png.name})", "", "| model | kind | task | pre-training CPU-hours | score |",
              "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for task, pts in points.items():
        for model, hours, (mean, std), kind in pts:
            lines.append(f"| {model} | {kind} | {task} | {hours:.2f} | {mean:.1f} ± {std:.1f} |")
    return lines + [""]


def _plot(points: dict[str, list], anchors: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(points)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        chain = [p for p in points[task] if p[3] != "one schedule"]  # the random init starts the chain's line
        if chain:
            xs = [p[1] for p in chain]
            ys = [p[2][0] for p in chain]
            ax.errorbar(xs, ys, yerr=[p[2][1] for p in chain], marker="o", capsize=3, label="bertkit chain")
            # neighbouring points (the random init, the first link) often score alike: their labels alternate
            # above the line and below it to the right
            for i, (x, y) in enumerate(zip(xs, ys)):
                ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(5, -12) if i % 2 else (0, 6),
                            ha="left" if i % 2 else "center", fontsize=8)  # fmt: skip
        for i, (model, x, (y, std), _) in enumerate(p for p in points[task] if p[3] == "one schedule"):
            ax.errorbar([x], [y], yerr=[std], marker="s", ls="none", capsize=3, color=f"C{i + 1}",
                        label=f"{model} (one schedule)")  # fmt: skip
            ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(8, -3), fontsize=8)
        # the published anchors are named in the legend, not beside their lines, where the points' own labels
        # would run into them
        task_anchors = sorted((anchors.get(task) or {}).items(), key=lambda kv: -kv[1])
        for (label, value), style in zip(task_anchors, itertools.cycle(("--", ":", "-."))):
            ax.axhline(value, ls=style, lw=1, color="grey", label=f"{label}: {value}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xlim(left=-0.04 * ax.get_xlim()[1])  # from no pre-training at all, its point drawn whole
        ax.set_xlabel("pre-training CPU-hours")
        ax.set_title(task)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
