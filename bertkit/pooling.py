"""Pooling: a sentence's token vectors into one vector, as sentence-transformers pools them (used by the
sentence encoders and by classification heads that pool instead of reading the pooler)."""

from __future__ import annotations

import torch
from torch import Tensor

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")


def pool(hidden: Tensor, mask: Tensor, mode: str) -> Tensor:
    """Token vectors [B, T, H] and attention mask [B, T] -> sentence vectors [B, H].

    ``mean``: average of the real tokens (sentence-transformers' default); ``cls``: the first token's
    vector (not the pooler); ``max``: element-wise max over real tokens; ``mean_sqrt_len``: the sum
    divided by sqrt(number of real tokens).
    """
    if mode == "cls":
        return hidden[:, 0]
    m = mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
    if mode == "max":
        return hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).amax(dim=1)
    summed = (hidden * m).sum(dim=1)
    count = m.sum(dim=1).clamp(min=1e-9)
    if mode == "mean":
        return summed / count
    if mode == "mean_sqrt_len":
        return summed / count.sqrt()
    raise ValueError(f"unknown pooling {mode!r}; choose one of {POOLING_MODES}")
