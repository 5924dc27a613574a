"""Markdown reports written only from :mod:`lab.experiment` result files (never typed by hand).

``python -m lab report CONFIG.toml [--results DIR] [--doc FILE]`` reads the matrix (for its layout and
commands) and every result file, and writes the report named by the config's ``report`` key (or ``--doc``)
plus its PNG figures beside it. ``report_kind = "paper"`` gives the paper's Tables 5, 6 and 7 in the paper's
shape, the same-budget comparison with transformers, the pre-training curves, a bar chart and the BERT-Base
estimate; ``report_kind = "results"`` a table of fine-tuning rows (docs/results/results.md). A cell without a result
file shows "not yet run"; each finding says whether it reproduces at this scale.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic_write
from lab.experiment import load_matrix, read_results, results_dir
from lab.report.paper import paper_report
from lab.report.results import results_report
from lab.report.scores import protocols

__all__ = ["write_report"]


def write_report(
    config: str | os.PathLike, results: str | os.PathLike | None = None, doc: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Write the report of the matrix ``config`` from its result files; returns what was written."""
    matrix = load_matrix(config)
    folder = results_dir(matrix, str(results) if results else None)
    res = read_results(folder) if folder.is_dir() else {}
    target = doc or matrix.raw.get("report")
    if not target:
        raise UserError(f'{config}: no `report = "..."` path in the config; pass --doc FILE')
    path = Path(target) if doc else Path(matrix.base / target)
    kind = matrix.raw.get("report_kind", "paper")
    if kind not in ("paper", "results"):
        raise UserError(f"{config}: report_kind must be 'paper' or 'results', not {kind!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    config_arg = os.path.relpath(Path(config).resolve(), matrix.base.parent)
    text = (paper_report if kind == "paper" else results_report)(matrix, res, path, config_arg, folder)
    with atomic_write(path) as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return {"report": str(path), "results": len(res), "cells": len(matrix.cells),
            "figures": sorted(str(p) for p in (path.parent / f"{path.stem}-{kind}.png"
                                               for kind in ("curves", "curve", "scores", *(f"{n}-scores" for n in protocols(matrix))))
                              if p.exists())}  # fmt: skip
