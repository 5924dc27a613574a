"""Quality per CPU-hour: downstream scores of pre-trained models against the CPU-hours their pre-training took
(a ``[curve]`` table in the matrix), with published anchors drawn as lines and the points' numbers on them.

    [curve]
    models = ["electra-mini-1h", "electra-mini-2h", ...]   # a chain of continue_from links, or any models
    tasks = ["SST-2", "STS-B"]
    anchors = { "SST-2" = { "BERT-Tiny (Google, test)" = 83.2 } }

A model's x is the CPU-hours of its whole chain (its own ``train_cpu_s`` plus the links it continues), its y
the mean over seeds of the task's primary score, with the seeds' spread as an error bar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.io import atomic_write
from lab.report.scores import mean_std, seed_scores


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


def curve_points(results: dict[str, dict], spec: dict[str, Any]) -> dict[str, list[tuple[str, float, tuple]]]:
    """task -> [(model, CPU-hours, (mean, std)), ...] for the models with both a pre-training and scores."""
    out: dict[str, list[tuple[str, float, tuple]]] = {}
    for task in spec.get("tasks", []):
        pts = []
        for model in spec.get("models", []):
            hours = chain_cpu_hours(results, model)
            ms = mean_std(seed_scores(results, model, task))
            if hours is not None and ms is not None:
                pts.append((model, hours, ms))
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
    lines += [f"![quality per CPU-hour]({png.name})", "", "| model | task | pre-training CPU-hours | score |",
              "| --- | --- | --- | --- |"]  # fmt: skip
    for task, pts in points.items():
        for model, hours, (mean, std) in pts:
            lines.append(f"| {model} | {task} | {hours:.2f} | {mean:.1f} ± {std:.1f} |")
    return lines + [""]


def _plot(points: dict[str, list], anchors: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(points)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        pts = points[task]
        if pts:
            xs = [p[1] for p in pts]
            ys = [p[2][0] for p in pts]
            ax.errorbar(xs, ys, yerr=[p[2][1] for p in pts], marker="o", capsize=3, label="bertkit")
            for x, y in zip(xs, ys):
                ax.annotate(
                    f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8
                )
        # anchors close together (BERT-Tiny's and BERT-Mini's STS-B) label one line above it, the next below
        for i, (label, value) in enumerate(sorted((anchors.get(task) or {}).items(), key=lambda kv: kv[1])):
            ax.axhline(value, ls="--", lw=1, color="grey")
            ax.annotate(f"{label}: {value}", (0, value), xycoords=("axes fraction", "data"), fontsize=8,
                        xytext=(4, 3 if i % 2 else -3), textcoords="offset points",
                        va="bottom" if i % 2 else "top")  # fmt: skip
        ax.set_xlim(left=0)  # the curve reads from no pre-training at all
        ax.set_xlabel("pre-training CPU-hours")
        ax.set_title(task)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
