"""Scaled dot-product attention with bertkit's cheaper dropout mask in training."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .dropout import dropout
from .state import mask_ok


def _attention_with_dropout(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool, p: float
) -> Tensor:
    """softmax(q k^T / sqrt(d)) with dropout p on the probabilities, times v: [B, heads, T, d] -> [B, heads, T, d].

    What SDPA computes on CPU when dropout_p > 0 (its math path: the fused kernel has no dropout), with
    bertkit's cheaper dropout mask on the [B, heads, T, T] probabilities. attn_mask: bool, True = attend."""
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
    if is_causal:
        tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        attn_mask = tri if attn_mask is None else attn_mask & tri
    if attn_mask is not None:  # the most negative float rather than -inf: a row with no key left stays finite
        scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
    return torch.matmul(dropout(torch.softmax(scores, dim=-1), p, True), v)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v with dropout on the probabilities: q, k, v [B, heads, T, d] -> same.

    ``attn_mask``: bool, broadcastable to [B, heads, T, T], True = may attend; ``causal`` adds the
    left-to-right mask. Without dropout this is ``F.scaled_dot_product_attention``."""
    if dropout_p > 0 and mask_ok(q):
        return _attention_with_dropout(q, k, v, attn_mask, causal, dropout_p)
    if causal and attn_mask is not None:  # SDPA takes one or the other
        tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        attn_mask, causal = attn_mask & tri, False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=causal)
