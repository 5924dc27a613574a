"""The results report (``report_kind = "results"``, docs/results/results.md): one row per fine-tuned model and task."""

from __future__ import annotations

from pathlib import Path

from lab.experiment import Matrix, features_name, seeds_of, task_models
from lab.report.curve import quality_curve
from lab.report.front import notes, provenance
from lab.report.scores import fmt, mean_std, metric_name, seed_scores
from lab.report.summary import summary_table
from lab.report.tables import pretrain_rows


def results_report(matrix: Matrix, results: dict[str, dict], doc: Path, config_arg: str, folder: Path) -> str:
    """One row per fine-tuning task of the matrix: mean ± std of the primary metric and the other metrics
    (after the pre-training scores, when the matrix pre-trains)."""
    lines = [f"# {matrix.raw.get('description', matrix.name)}", ""] + provenance(
        matrix, results, config_arg, folder
    )
    pretraining = pretrain_rows(matrix, results)
    lines += (
        notes(matrix) + summary_table(matrix, results) + pretraining + quality_curve(matrix, results, doc)
    )
    lines += ["## Fine-tuning", ""] if pretraining else []
    lines += [
        "| model | task | metric | result | other metrics (last seed) | settings |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in [x["name"] for x in matrix.raw["model"]]:
        for t in matrix.raw.get("task", []):
            if m not in task_models(matrix.raw, t):
                continue
            xs = seed_scores(results, m, t["name"])
            last = next((r for n, r in sorted(results.items(), reverse=True)
                         if n.startswith(f"finetune/{m}/{t['name']}/seed")), None)  # fmt: skip
            other = ", ".join(f"{k} {v:.2f}" for k, v in (last or {}).get("metrics", {}).items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool))  # fmt: skip
            extra = ", ".join(
                f"test {k} {v:.2f}"
                for k, v in (last or {}).get("test", {}).items()
                if k in ("f1", "accuracy")
            )
            settings = ", ".join(f"{k} {v}" for k, v in (last or {}).get("hyperparameters", {}).items())
            lines.append(f"| {m} | {t['name']} | {metric_name(matrix, t['name'], 'primary')} | "
                         f"{fmt(mean_std(xs), len(xs), len(seeds_of(matrix.raw, t)))} | {other}{'; ' + extra if extra else ''} | {settings} |")  # fmt: skip
    for f in matrix.raw.get("features", []):
        for v in f.get("variants", []):
            rs = [
                r
                for n, r in sorted(results.items())
                if n.startswith(f"features/{features_name(f)}/{v['name']}/seed")
            ]
            ms = mean_std([r["primary"] for r in rs])
            settings = ", ".join(
                f"{k} {x}" for k, x in (rs[-1].get("hyperparameters", {}) if rs else {}).items()
            )
            lines.append(f"| {f['model']} | {f['task']} feature-based ({v['name']}, BiLSTM on frozen layers) | F1 | "
                         f"{fmt(ms, len(rs), len(seeds_of(matrix.raw, f)))} | | {settings} |")  # fmt: skip
    return "\n".join(lines) + "\n"
