"""The switch between bertkit's CPU kernels and the plain PyTorch reference ops.

Every named call of :mod:`bertkit.kernels` asks :func:`fast_ok` whether it may take its fast path; when
the kernels are off (by a setting in the environment, :mod:`bertkit.settings`; by
:func:`set_enabled(False) <set_enabled>`; or inside ``with reference_ops():``) each call computes the
textbook operation with ``torch.nn.functional`` instead: separate Q/K/V projections, ``F.linear``, ``F.dropout``, masked SDPA over the padded batch.
Both give the same outputs and gradients up to float rounding (tests/test_kernels.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from bertkit.settings import kernels_enabled

_enabled = kernels_enabled()  # read once, at import: the hot path reads this flag


def enabled() -> bool:
    """Whether bertkit's kernels are on (the default) rather than the reference ops."""
    return _enabled


def set_enabled(flag: bool) -> bool:
    """Turn the kernels on or off for the whole process; returns the previous setting."""
    global _enabled
    previous, _enabled = _enabled, bool(flag)
    return previous


@contextmanager
def reference_ops() -> Iterator[None]:
    """Run the plain PyTorch reference ops inside the block (the kernels' previous setting after it)."""
    previous = set_enabled(False)
    try:
        yield
    finally:
        set_enabled(previous)


def eager_on_cpu(x: Tensor) -> bool:
    """The kernels on, ``x`` on the CPU, run eagerly: torch.compile and TorchScript tracing (and so the ONNX
    export) get the plain ops, which they fuse or export. Tracing is checked first, so nothing turns a traced
    size into a Python value."""
    tracing = torch.compiler.is_compiling() or torch.jit.is_tracing()
    return _enabled and not tracing and x.device.type == "cpu"


def fast_ok(x: Tensor) -> bool:
    """Whether ``x`` may take bertkit's own CPU kernels: the kernels on, float32 on CPU, run eagerly."""
    return eager_on_cpu(x) and x.dtype == torch.float32


def mask_ok(x: Tensor) -> bool:
    """Whether dropout on ``x`` may use bertkit's cheaper random mask: as :func:`fast_ok`, bfloat16 too.

    The mask does not depend on the dtype, and under bf16 autocast the dropouts see bfloat16 activations,
    where ``F.dropout``'s ``bernoulli_`` is the largest op after the GEMMs of a MiniLM training step."""
    return eager_on_cpu(x) and x.dtype in (torch.float32, torch.bfloat16)
