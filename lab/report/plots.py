"""The report's figures: pre-training curves and bar charts of downstream scores with error bars."""

from __future__ import annotations

from pathlib import Path

from bertkit.io import atomic_write
from lab.report.scores import mean_std, seed_scores


def plot_curves(results: dict[str, dict], path: Path) -> bool:
    """Pre-training curves of every pre-training cell on one PNG (MLM loss, MLM accuracy, NSP accuracy
    against tokens seen); False when there is nothing to plot."""
    runs = [
        (r["model"], r["curve"])
        for n, r in sorted(results.items())
        if n.startswith("pretrain/") and r.get("curve")
    ]
    if not runs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("masked_lm_loss", "MLM loss (train; LTR: next-token loss)"), ("masked_lm_accuracy", "MLM accuracy (train)"),
              ("next_sentence_accuracy", "NSP accuracy (train)")]  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (key, title) in zip(axes, panels):
        for model, curve in runs:
            pts = [
                (p["tokens"] / 1e6, p.get(key, p.get("loss") if key == "masked_lm_loss" else None))
                for p in curve
            ]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts), label=model, lw=1.3)
        ax.set_xlabel("tokens seen (millions)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return True


def plot_bars(
    results: dict[str, dict],
    models: list[str],
    tasks: list[str],
    path: Path,
    metrics: dict[str, str] | None = None,
) -> bool:
    """Downstream scores, mean ± std over seeds, one group of bars per task (labelled with ``metrics[task]``);
    False when nothing ran."""
    data = {(m, t): mean_std(seed_scores(results, m, t)) for m in models for t in tasks}
    if not any(data.values()):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(tasks)), 4.5))
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        xs, ys, es = [], [], []
        for j, t in enumerate(tasks):
            if data[(m, t)] is not None:
                xs.append(j + i * width)
                ys.append(data[(m, t)][0])
                es.append(data[(m, t)][1])
        ax.bar(xs, ys, width, yerr=es, capsize=2, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tasks))])
    ax.set_xticklabels([f"{t}\n({(metrics or {}).get(t) or 'score'})" for t in tasks])
    ax.set_ylabel("dev score (mean ± std over seeds)")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return True
