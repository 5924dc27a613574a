"""Mixed precision for the Trainer: which autocast context and whether a gradient scaler.

``fp32``: no autocast. ``bf16``: autocast to bfloat16 (CPU or GPU; bf16 has fp32's range, so no scaler).
``fp16``: autocast to float16 on CUDA with a :class:`torch.amp.GradScaler` (float16's small range
underflows small gradients: the scaler multiplies the loss before backward, unscales before clipping, and
skips a step whose gradients overflowed while lowering the scale). fp16 on a CPU is refused.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "bf16", "fp16")


def check_precision(precision: str, device: torch.device) -> None:
    """Raise ValueError for an unknown precision or fp16 off CUDA."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs a CUDA GPU (it uses a grad scaler); on CPU use bf16 or fp32")


def autocast(precision: str, device: torch.device):
    """The context the forward pass runs under."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def make_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 on CUDA, else None (fp32/bf16 need none)."""
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None
