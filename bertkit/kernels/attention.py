"""Scaled dot-product attention with bertkit's cheaper dropout mask in training, and bf16 attention in
fp32 in training where this CPU's bf16 attention (forward and backward) is the slower of the two.

On an AMD EPYC with AVX512-BF16 but no AMX, PyTorch's fused CPU attention ran its backward 2-3x slower in
bfloat16 than in fp32 at BERT-mini's shapes (the forward alike), so a bf16 training step spent more time in
attention than an fp32 one; a CPU with bf16 matrix units may well rank them the other way. So how bf16
attention runs in training, as bf16 or in fp32 (q, k, v cast up, the output cast back), is a per-machine
choice (:func:`decide_bf16_attention`, :mod:`bertkit.tuning`), recorded with a training run so that a resume
computes the same way. Inference (no gradients) keeps bf16.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import settings
from .dropout import dropout
from .state import eager_on_cpu, mask_ok

logger = logging.getLogger("bertkit")

BF16_ATTENTION = ("bf16", "fp32")
_bf16_attention: str | None = None  # chosen at first bf16 use (decide_bf16_attention), or pinned by a resume


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
    if _runs_in_bf16(q) and torch.is_grad_enabled() and eager_on_cpu(q) and bf16_attention() == "fp32":
        return _sdpa_in_fp32(q, k, v, attn_mask, dropout_p, causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=causal)


def _runs_in_bf16(q: Tensor) -> bool:
    """Whether SDPA would compute in bf16: bf16 inputs, or any under CPU bf16 autocast, which casts them
    down (rotary positions leave ModernBERT's queries and keys in fp32)."""
    return q.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )


def _sdpa_in_fp32(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, p: float, causal: bool
) -> Tensor:
    """SDPA that would run in bf16 (:func:`_runs_in_bf16`) computed in fp32: q, k, v [B, heads, T, d] ->
    bf16 [B, heads, T, d], the dtype the bf16 path returns. Autocast is off inside: CPU autocast runs SDPA
    in bf16 and would cast the inputs straight back down."""
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=attn_mask, dropout_p=p, is_causal=causal
        )
    return out.to(torch.bfloat16)


def bf16_attention() -> str:
    """How this process runs bf16 attention on the CPU, "bf16" or "fp32" (chosen at first use)."""
    global _bf16_attention
    if _bf16_attention is None:
        _bf16_attention = decide_bf16_attention()[0]
    return _bf16_attention


def bf16_attention_chosen() -> str | None:
    """The choice this process has made, None before any bf16 attention ran (the question measures nothing)."""
    return _bf16_attention


def use_bf16_attention(choice: str | None) -> None:
    """Pin the choice; None: choose again at next use."""
    global _bf16_attention
    if choice is not None and choice not in BF16_ATTENTION:
        raise ValueError(f"bf16 attention must be one of {', '.join(BF16_ATTENTION)} or None, got {choice!r}")
    _bf16_attention = choice


def resume_bf16_attention(recorded: str | None, source: str = "the checkpoint") -> None:
    """Run bf16 attention as the resumed run recorded (``source`` wrote it): the two ways round differently,
    so a resume that chose again could compute other bits. Nothing recorded (an fp32 run, an older
    checkpoint): the machine's choice. A choice pinned in the environment wins, with a warning."""
    if recorded not in BF16_ATTENTION:
        return
    pinned = settings.BF16_ATTENTION.value()
    if pinned is not None and pinned != recorded:
        logger.warning("%s ran bf16 attention in %s; %s=%s keeps it in %s, so this resume is not bitwise the "
                       "run it continues", source, recorded, settings.BF16_ATTENTION.name, pinned, pinned)  # fmt: skip
        return
    use_bf16_attention(recorded)


def decide_bf16_attention(force: bool = False) -> tuple[str, str]:
    """Whether bf16 attention runs faster as bf16 or in fp32 on this machine, and where that came from
    (:func:`bertkit.tuning.decide`): forward and backward of BERT-mini-shaped attention (8 x 4 heads x 128
    tokens x 64, keys masked), both ways alternating. ``force``: measured again even when cached."""
    from ..tuning import decide, time_alternating

    def measure() -> tuple[str, dict[str, Any]]:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(8, 4, 128, 64, generator=g).bfloat16().requires_grad_() for _ in range(3))
        mask = torch.ones(8, 1, 1, 128, dtype=torch.bool)
        mask[1::2, ..., 96:] = False  # half the sequences padded, as a real batch
        grad = torch.randn(8, 4, 128, 64, generator=g).bfloat16()

        def step(in_fp32: bool):
            def run() -> None:
                if in_fp32:
                    out = _sdpa_in_fp32(q, k, v, mask, 0.0, False)
                else:
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                out.backward(grad)

            return run

        # with gradients and without autocast, as in training, whatever the caller's context
        with torch.enable_grad(), torch.autocast("cpu", enabled=False):
            times = time_alternating({"bf16": step(False), "fp32": step(True)}, rounds=7)
        choice = min(times, key=times.__getitem__)
        return choice, {f"{name}_ms": round(t * 1e3, 3) for name, t in times.items()}

    return decide("bf16_attention", measure, override=settings.BF16_ATTENTION, force=force)
