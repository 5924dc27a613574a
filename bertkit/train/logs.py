"""Training logs: JSON-lines records and the loss/metric curves PNG (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from bertkit.io import atomic_write


def plot_curves(
    metrics_path: Path, eval_path: Path | None, out_png: Path, keys: Iterable[str] | None = None
) -> Path | None:
    """Loss and accuracy-like metrics against step, from the jsonl logs, as a PNG (matplotlib Agg)."""
    rows = read_jsonl(metrics_path)
    evals = read_jsonl(eval_path) if eval_path else []
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    skip = {"step", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "nonfinite_steps", "epoch"}
    keys = (
        list(keys)
        if keys
        else [k for k in rows[-1] if k not in skip and isinstance(rows[-1][k], (int, float))]
    )
    loss_keys = [k for k in keys if "loss" in k]
    other = [k for k in keys if k not in loss_keys]
    # (title, training keys, the word that picks the evaluation keys) of each panel
    panels = [("loss", loss_keys, "loss")] + ([("metrics", other, "acc")] if other else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(11 if other else 6, 4), squeeze=False)
    steps = [r["step"] for r in rows]
    for ax, (title, train_keys, eval_word) in zip(axes[0], panels):
        for k in train_keys:
            ax.plot(steps, [r.get(k) for r in rows], label=f"train {k}")
        for k in [k for k in (evals[-1] if evals else {}) if eval_word in k]:
            ax.plot([e["step"] for e in evals], [e.get(k) for e in evals], "o--", label=f"eval {k}")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(out_png, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return out_png


def read_jsonl(path: Path | None) -> list[dict]:
    if path is None or not Path(path).is_file():
        return []
    rows = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line from a killed run
    return rows


def truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.is_file():
        return
    rows = [r for r in read_jsonl(path) if r.get("step", 0) <= max_step]
    with atomic_write(path) as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
