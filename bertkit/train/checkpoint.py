"""Atomic, resumable training checkpoints.

A training checkpoint is one file ``OUT/checkpoints/step-XXXXXXXX.pt`` written with
:func:`bertkit.io.atomic_write` (temp file in the same directory, fsync, rename), so a run killed at any
moment (SIGKILL included) leaves either the previous complete checkpoint or the new complete one.
It holds the model, optimizer, scheduler and grad-scaler state, every RNG state (python ``random``,
numpy's legacy global, torch CPU, CUDA), the data position (whatever the batch source's
``state_dict()`` returns, including its own generator) and the trainer's counters. Only the last
``keep_last`` checkpoints are kept.

These are *training* checkpoints; the final model is exported separately in the Hugging Face layout.
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.io import atomic_write

logger = logging.getLogger("bertkit")

_NAME = re.compile(r"^step-(\d{8,})\.pt$")


def rng_state() -> dict[str, Any]:
    """Every global RNG state a training step can touch (dropout uses torch's)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def list_checkpoints(out_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint under ``out_dir``, oldest first."""
    d = checkpoint_dir(out_dir)
    if not d.is_dir():
        return []
    found = []
    for p in d.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def save_checkpoint(out_dir: str | Path, step: int, state: dict[str, Any], keep_last: int = 2) -> Path:
    """Write ``state`` atomically as the checkpoint of ``step``, then delete all but the last ``keep_last``."""
    d = checkpoint_dir(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step-{step:08d}.pt"
    with atomic_write(path, "wb") as f:
        torch.save(state, f)
    if keep_last and keep_last > 0:
        for _, old in list_checkpoints(out_dir)[:-keep_last]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    # weights_only=False: the state holds python/numpy RNG tuples; these files are our own.
    return torch.load(path, map_location=map_location, weights_only=False)


def latest_checkpoint(out_dir: str | Path, map_location="cpu") -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads; a damaged newest file (should never happen) falls back to older."""
    for _, path in reversed(list_checkpoints(out_dir)):
        try:
            return path, load_checkpoint(path, map_location)
        except Exception as e:  # noqa: BLE001 - report and try the previous one
            logger.warning("checkpoint %s could not be read (%s); trying an older one", path, e)
    return None
