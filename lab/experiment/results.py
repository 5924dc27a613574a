"""Result files: where they go, what machine and settings fingerprint they record, reading them back."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from lab.experiment.matrix import Cell, Matrix


def machine_info() -> dict[str, Any]:
    """commit (of the bertkit code that runs), torch version, CPU model name, generation and ISA, cores."""
    import torch

    here = Path(__file__).resolve().parent
    commit, dirty = "unknown", None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()  # fmt: skip
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=here,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
        dirty = bool(st.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    from bertkit.tuning import ISA_FLAGS, cpu_info

    cpu = cpu_info()
    # same model name, different generations: results of one cell on two hosts can differ in the last digits
    # (their BLAS takes other kernels), so each result says which generation and ISA it ran on
    return {"commit": commit, "dirty": dirty, "torch": torch.__version__.split("+")[0], "cpu": cpu["model"],
            "cpu_generation": cpu["family_model_stepping"], "isa": [f for f in ISA_FLAGS if f in cpu["flags"]],
            "cores": os.cpu_count(), "python": platform.python_version()}  # fmt: skip


def results_dir(matrix: Matrix, override: str | None = None) -> Path:
    return Path(override) if override else matrix.base / "results" / matrix.name


# a model's keys that guard an input rather than set what a cell computes: naming the committed weights a
# `pretrained` folder must hold leaves the cells that already read them as they were
MODEL_KEYS_NOT_IN_A_CELL = ("pretrained_sha256",)

# a task's keys that choose which cells exist, not what one computes: the models, the seeds, and the rates
# beyond the grid (an extension cell has its own rate; a seed cell's moved pick is checked at run time)
TASK_KEYS_NOT_IN_A_CELL = ("models", "seeds", "lr_extend")


def portable(value: Any, roots: list[Path], in_task: bool = False) -> Any:
    """``value`` with absolute paths under ``roots`` made relative to them, and a task's matrix-wide keys and a
    model's input guards left out: what a cell computes, the same on every machine and checkout."""
    if isinstance(value, dict):
        return {k: portable(v, roots, in_task=k in ("task", "tasks")) for k, v in value.items()
                if not (in_task and k in TASK_KEYS_NOT_IN_A_CELL) and k not in MODEL_KEYS_NOT_IN_A_CELL}  # fmt: skip
    if isinstance(value, list | tuple):
        return [portable(v, roots, in_task) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        path = Path(os.path.normpath(value))  # "experiments/../../shared" and "/work/shared" alike
        for root in roots:
            if path.is_relative_to(root):
                return path.relative_to(root).as_posix()
    return value


def cell_settings(matrix: Matrix) -> dict[str, str]:
    """Cell name -> a fingerprint (16 hex digits of sha256) of its settings and of every cell it reads, so a
    change anywhere upstream changes it too. Recorded in each result file (``settings``); a finished cell
    whose fingerprint no longer matches the config was run with other settings."""
    import hashlib

    from lab.experiment.paths import data_root

    roots = [Path(os.path.normpath(p)) for p in (data_root(matrix).absolute(), matrix.base.absolute())]
    prints: dict[str, str] = {}
    for cell in matrix.cells:  # in run order: a cell's inputs come before it
        text = json.dumps([portable(cell.spec, roots), [prints[n] for n in cell.needs]], sort_keys=True,
                          default=str)  # fmt: skip
        prints[cell.name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return prints


def changed_cells(cells: list[Cell], done: dict[str, dict], settings: dict[str, str]) -> list[str]:
    """The finished cells among ``cells`` whose recorded settings differ from ``settings`` (``cell_settings``
    of the config now). Result files from before fingerprints were recorded have none: unchanged."""
    return [c.name for c in cells if done.get(c.name, {}).get("settings") not in (None, settings[c.name])]


def read_results(folder: str | os.PathLike) -> dict[str, dict]:
    """Every result file under ``folder`` by cell name."""
    out = {}
    for p in sorted(Path(folder).glob("*.json")):
        try:
            r = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(
                f"{p}: not a readable result file ({e}); delete it to run that cell again"
            ) from None
        if isinstance(r, dict) and "cell" in r:
            out[r["cell"]] = r
    return out
