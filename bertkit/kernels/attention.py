"""Scaled dot-product attention with bertkit's cheaper dropout mask in training, and two batched GEMMs
instead of the fused kernel on short sequences where that measured faster on this machine."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.tuning import choose, time_alternating

from .dropout import dropout
from .state import fast_ok, mask_ok

# Up to this many keys the [T, T] scores of the matmul path are small (64 KiB per head at 128), and the
# fused CPU kernel's fixed cost per call (its blocking and per-thread buffers) outweighs the work: a
# SST-2 batch of 32 attends in ~20 groups of equal length, each a few dozen tokens long.
SHORT_KEYS = 128

_UNSET = object()
_choice: Any = _UNSET


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
    if attn_mask is None and not causal and dropout_p == 0 and k.shape[-2] <= SHORT_KEYS and fast_ok(q):
        if short_matmul_in_use():
            return _short_attention(q, k, v)
    if causal and attn_mask is not None:  # SDPA takes one or the other
        tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        attn_mask, causal = attn_mask & tri, False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=causal)


def _short_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(d)) v with no mask and no dropout, as two batched GEMMs: q [B, heads, T, d],
    k and v [B, heads, S, d] -> [B, heads, T, d]. The same arithmetic as SDPA's math path; on short
    sequences it beats the fused kernel on CPUs where :func:`short_matmul_in_use` measured so."""
    b, a, t, d = q.shape
    s = k.shape[-2]
    q2, k2, v2 = q.reshape(b * a, t, d), k.reshape(b * a, s, d), v.reshape(b * a, s, d)
    # beta=0: the uninitialised first argument is ignored, only its shape is used
    scores = torch.baddbmm(q2.new_empty(b * a, t, s), q2, k2.transpose(1, 2), beta=0.0, alpha=d**-0.5)
    return torch.bmm(scores.softmax(-1), v2).view(b, a, t, d)


def _measure_attention() -> tuple[str, dict[str, Any]]:
    """The fused SDPA kernel vs :func:`_short_attention` on short groups of BERT heads (~20 ms idle)."""
    g = torch.Generator().manual_seed(0)
    # (sequences, heads, length, head size): MiniLM's and BERT-base's heads on sentence-length groups
    shapes = [(8, 12, 16, 32), (4, 12, 40, 32), (4, 12, 32, 64), (1, 12, 128, 64)]
    inputs = [[torch.randn(*shape, generator=g) for _ in range(3)] for shape in shapes]

    def fused() -> None:
        for q, k, v in inputs:
            F.scaled_dot_product_attention(q, k, v)

    def matmul() -> None:
        for q, k, v in inputs:
            _short_attention(q, k, v)

    with torch.no_grad():
        t = time_alternating({"sdpa": fused, "matmul": matmul}, rounds=7, warmup=2)
    # the fused kernel unless the GEMMs are clearly faster: it is what SDPA itself runs
    choice = "matmul" if t["matmul"] < 0.9 * t["sdpa"] else "sdpa"
    return choice, {k: round(v * 1e3, 3) for k, v in t.items()} | {"unit": "ms per 4 short attention calls"}


def short_matmul_in_use() -> bool:
    """Whether attention over at most :data:`SHORT_KEYS` keys, with no mask and no dropout, runs as two
    batched GEMMs here rather than the fused SDPA kernel: chosen once per machine (:mod:`bertkit.tuning`;
    ``BERTKIT_ATTENTION=sdpa|matmul`` overrides it)."""
    global _choice
    if _choice is _UNSET:
        choice = choose("attention", _measure_attention, env="BERTKIT_ATTENTION")
        if choice not in ("matmul", "sdpa"):
            raise ValueError(f"BERTKIT_ATTENTION={choice!r}: expected 'sdpa' or 'matmul'")
        _choice = choice
    return _choice == "matmul"


def use_attention(name: str | None) -> None:
    """Force the short-sequence attention path for this process: "matmul", "sdpa", or None to choose
    again at next use."""
    global _choice
    if name not in (None, "matmul", "sdpa"):
        raise ValueError(f"attention path {name!r}: expected 'matmul', 'sdpa' or None")
    _choice = _UNSET if name is None else name
