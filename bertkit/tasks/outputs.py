"""Files a fine-tuning run writes besides the model: the loss plot and per-example predictions."""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.io import atomic_write
from bertkit.tasks.spec import TaskData


def plot_losses(losses: list[float], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, lw=0.6, alpha=0.4, label="step")
    w = max(1, len(losses) // 50)
    if len(losses) >= w:
        smooth = [
            sum(losses[max(0, i - w + 1) : i + 1]) / len(losses[max(0, i - w + 1) : i + 1])
            for i in range(len(losses))
        ]
        ax.plot(range(1, len(losses) + 1), smooth, lw=1.5, label=f"mean of {w}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def write_predictions(path: Path, task: TaskData, examples: list, preds: list, raw: list) -> None:
    with atomic_write(path) as f:
        for i, (e, p) in enumerate(zip(examples, preds)):
            if task.kind == "token":
                row = {"index": i, "words": e.words, "gold": e.tags, "pred": p}
            else:
                row = {"guid": getattr(e, "guid", str(i)), "pred": p, "gold": e.label}
                if task.labels is not None and task.kind == "seq":
                    row["probs"] = {lab: round(v, 6) for lab, v in zip(task.labels, raw[i][1])}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
