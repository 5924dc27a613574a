"""Inverted dropout with a cheaper mask on CPU.

``F.dropout`` on CPU draws its mask with ``bernoulli_``, one double-precision draw per element; in a
BERT pre-training step that is ~10% of the time. Here one 64-bit draw of the global generator gives
four 15-bit uniform integers, and an element is dropped when its integer is below
``round(p * 2**15)``. The drop probability is therefore ``p`` rounded to a multiple of 2**-15 (0.1
becomes 0.100006) and the kept values are scaled by the exact ``1 / (1 - p_rounded)``, so the
expectation is unchanged. The mask serves float32 and bfloat16 (bf16 autocast) alike; other devices and
dtypes, torch.compile, and the reference ops (:func:`bertkit.kernels.reference_ops`) use ``F.dropout``.

Randomness: the global torch generator, as ``nn.Dropout`` (the trainer seeds it and checkpoints its
state), so a seeded run is reproducible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .state import mask_ok

_LEVELS = 1 << 15


def _keep_mask(shape: torch.Size, p: float) -> tuple[Tensor, float]:
    """A bool keep-mask of ``shape`` (True with probability 1 - p, rounded as above) and its scale."""
    n = shape.numel()
    threshold = round(p * _LEVELS)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_()  # uniform in [0, 2**63)
    # each 64-bit word viewed as four int16 lanes; the top lane has only 15 random bits, so every lane
    # is cut to its low 15 bits: four uniform draws from [0, 2**15) per word
    lanes = words.view(torch.int16)[:n].bitwise_and_(_LEVELS - 1)
    return torch.ge(lanes, threshold).view(shape), _LEVELS / (_LEVELS - threshold)


class _MaskedScale(torch.autograd.Function):
    """y = x * keep * scale; the gradient is the same mask and scale."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(scale).mul_(keep)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (keep,) = ctx.saved_tensors
        return grad.mul(ctx.scale).mul_(keep), None, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout: x [*] -> [*], each element zeroed with probability ~p, the rest scaled up."""
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    if not mask_ok(x) or x.numel() == 0:
        return F.dropout(x, p, True)
    keep, scale = _keep_mask(x.shape, p)
    return _MaskedScale.apply(x.contiguous(), keep, scale)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same attribute ``p``, no parameters) computed by :func:`dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
