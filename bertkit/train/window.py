"""The Trainer's log window: losses, token counts and metrics summed between two log records.

A metric is either a scalar (averaged over the window's steps) or a ``(numerator, denominator)`` pair (summed,
then divided: a correctly weighted accuracy). With several processes the sums are all-reduced before they
are divided, so every rank writes the same record. The window is part of a checkpoint (``state()``), so a
resumed run logs exactly what an uninterrupted one would.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist


class LogWindow:
    """Sums of one log window; ``data`` is the checkpointed dict (``loss``, ``n``, ``tokens``, ``metrics``,
    ``pairs``, and ``t``: when the window's first step started, so tokens/s covers whole steps)."""

    def __init__(self, state: dict | None = None):
        self.data: dict = dict(state, t=None) if state else self._empty()

    @staticmethod
    def _empty() -> dict:
        return {"loss": 0.0, "n": 0, "tokens": 0, "metrics": {}, "pairs": {}, "t": time.perf_counter()}

    def state(self) -> dict:
        """The checkpointable state (the start time is meaningless in another process)."""
        return dict(self.data, t=None)

    @property
    def empty(self) -> bool:
        return self.data["n"] == 0

    def start_clock(self) -> None:
        self.data["t"] = time.perf_counter()

    def add(self, loss: float, metrics: dict, tokens: int) -> None:
        """One optimizer step's mean loss, its metrics (scalars or pairs) and its token count."""
        w = self.data
        w["loss"] += loss
        w["n"] += 1
        w["tokens"] += tokens
        for k, v in metrics.items():
            if isinstance(v, tuple):
                num, den = w["pairs"].get(k, (0.0, 0.0))
                w["pairs"][k] = (num + v[0], den + v[1])
            else:
                s, n = w["metrics"].get(k, (0.0, 0))
                w["metrics"][k] = (s + v, n + 1)

    def flush(self, step: int, extra: dict, world_size: int, device: torch.device) -> dict[str, Any]:
        """The window's record ``{"step", "loss", metric..., **extra, "tokens_per_s"}`` (reduced over ranks);
        the window starts afresh. A collective with more than one process: every rank must call it."""
        w = self.data
        names_m = sorted(w["metrics"])
        names_p = sorted(w["pairs"])
        vec = [w["loss"], float(w["n"]), float(w["tokens"])]
        for k in names_m:
            vec += [w["metrics"][k][0], float(w["metrics"][k][1])]
        for k in names_p:
            vec += list(w["pairs"][k])
        if world_size > 1:
            t = torch.tensor(vec, dtype=torch.float64, device=device)
            dist.all_reduce(t)
            vec = t.tolist()
        elapsed = time.perf_counter() - w["t"] if w["t"] is not None else float("nan")
        n = max(vec[1], 1.0)
        rec: dict[str, Any] = {"step": step, "loss": vec[0] / n}
        i = 3
        for k in names_m:
            rec[k] = vec[i] / max(vec[i + 1], 1.0)
            i += 2
        for k in names_p:
            rec[k] = vec[i] / vec[i + 1] if vec[i + 1] else float("nan")
            i += 2
        rec.update(extra)
        rec["tokens_per_s"] = vec[2] / elapsed if elapsed and elapsed > 0 else None
        self.data = self._empty()
        return rec
