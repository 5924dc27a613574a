"""Atomic, resumable training checkpoints.

A training checkpoint is one file ``OUT/checkpoints/step-XXXXXXXX.pt`` written with
:func:`bertkit.io.atomic_write` (temp file in the same directory, fsync, rename), so a run killed at any
moment (SIGKILL included) leaves either the previous complete checkpoint or the new complete one.
It holds the model, optimizer, scheduler and grad-scaler state, every RNG state (python ``random``,
numpy's legacy global, torch CPU, CUDA), the data position (whatever the batch source's
``state_dict()`` returns, including its own generator), the trainer's counters and the per-machine choices the
run computed with (``choices``: the fp32 GEMM backend and the precision ``auto`` resolved to; a resume takes
them, :func:`bertkit.kernels.gemm.resume_backend`, :func:`bertkit.train.precision.resume_precision`). Only the
last ``keep_last`` checkpoints are kept.

These are *training* checkpoints; the final model is exported separately in the Hugging Face layout.

Loading never unpickles code: files are read with ``torch.load(weights_only=True)``, which accepts only
tensors and plain containers/scalars. So the state is stored in those types (numpy's RNG key as a tensor,
numpy scalars as Python numbers), and a foreign, damaged or incomplete file is refused with a
:class:`~bertkit.errors.UserError` naming it instead of being executed or silently skipped.
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.errors import UserError
from bertkit.io import atomic_write, remove_stale_temps

logger = logging.getLogger("bertkit")

_NAME = re.compile(r"^step-(\d{8,})\.pt$")
# Every checkpoint the trainer writes has these; a file without them is not a bertkit training checkpoint.
REQUIRED_KEYS = ("step", "model", "optimizer", "rng")


def rng_state() -> dict[str, Any]:
    """Every global RNG state a training step can touch (dropout uses torch's)."""
    name, key, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),  # (version, tuple of 625 ints, gauss or None): plain types
        # numpy's MT19937 state, with the uint32 key as an int64 tensor (ndarrays need unpickling code)
        "numpy": {
            "name": str(name),
            "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    npst = state["numpy"]
    key = npst["key"].numpy().astype(np.uint32)
    np.random.set_state((npst["name"], key, npst["pos"], npst["has_gauss"], npst["cached_gaussian"]))
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
    remove_stale_temps(d)  # a write killed (SIGKILL) mid-way left its temp file: nobody else writes here
    path = d / f"step-{step:08d}.pt"
    with atomic_write(path, "wb") as f:
        torch.save(_plain(state), f)
    if keep_last and keep_last > 0:
        for _, old in list_checkpoints(out_dir)[:-keep_last]:
            old.unlink(missing_ok=True)
    return path


def _plain(obj: Any) -> Any:
    """``obj`` with numpy values turned into what ``weights_only`` loading accepts (numbers, tensors)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    return obj


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, without running any code from the file.

    Raises UserError naming ``path`` when the file is not one of ours (it holds objects other than
    tensors and plain values, e.g. a planted pickle), is damaged or truncated, or lacks required keys."""
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling refused, truncated zip, bad magic... all one answer
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights_only" in str(e) or "Unsupported global" in str(e):
            reason = "it holds objects other than tensors and plain values (not written by bertkit)"
        raise UserError(
            f"{path}: not a readable bertkit training checkpoint ({reason[:200]}); "
            "move it out of the checkpoints folder to resume from an older one, or start a new run"
        ) from None
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise UserError(
            f"{path}: not a complete bertkit training checkpoint (missing {', '.join(missing)}); "
            "move it out of the checkpoints folder to resume from an older one, or start a new run"
        )
    return state


def latest_checkpoint(out_dir: str | Path, map_location="cpu") -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint under ``out_dir`` (None if there is none).

    Writes are atomic, so the newest file is complete unless someone else put or damaged it there; such a
    file is refused (UserError naming it) rather than skipped, so a run never silently resumes elsewhere."""
    found = list_checkpoints(out_dir)
    if not found:
        return None
    path = found[-1][1]
    return path, load_checkpoint(path, map_location)
