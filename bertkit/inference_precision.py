"""The precision of inference (``bertkit embed``, ``bertkit serve``, ``SentenceEncoder``): fp32, bf16, or auto.

``fp32`` (the default) is the faithful path: hidden states match transformers' to float rounding.
``bf16`` runs the model under bf16 autocast: the GEMMs in bfloat16 (AMX or AVX512-BF16 on a CPU that has
them), LayerNorm and softmax in fp32, outputs returned as fp32.
``auto`` measures once per machine and model (:func:`choose_inference_precision`): bf16 when it is at
least 10% faster here AND its outputs agree with fp32's on a probe batch, else fp32. The choice is logged
and cached (:mod:`bertkit.tuning`); an environment variable overrides it (:mod:`bertkit.settings`).

Training has its own switch (``--precision``, :mod:`bertkit.train.precision`), judged on the loss; here the
judge is the outputs themselves, since nothing downstream averages the rounding away.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from .errors import UserError

INFERENCE_PRECISIONS = ("fp32", "bf16", "auto")

# Every real token's last hidden state in bf16 must point where fp32's does: cosine >= this. Measured on
# the probe batch: all-MiniLM-L6-v2 0.99983, a random BERT-base 0.99999.
MIN_TOKEN_COSINE = 0.999
# bf16 is taken only when it is at least this much faster (below, the measurement's noise decides)
MIN_SPEEDUP = 1.1


def check_inference_precision(precision: str) -> None:
    """Raise UserError naming the choices for an unknown precision."""
    if precision not in INFERENCE_PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {precision!r}")


def inference_autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The context a forward pass runs under for a resolved precision ("fp32" or "bf16")."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def probe_batch(
    vocab_size: int, generator: torch.Generator, n: int = 16, max_seq_length: int = 128
) -> tuple[Tensor, Tensor]:
    """(input_ids [n, T], attention_mask [n, T]): n sequences of lengths spread evenly over
    [8, max_seq_length], right-padded with id 0, their ids drawn from ``generator`` (above the first 1,000
    ids of a large vocabulary, which BERT's vocabularies spend on special and unused tokens)."""
    lengths = torch.linspace(min(8, max_seq_length), max_seq_length, n).long()
    width = int(lengths.max())
    low = 1000 if vocab_size > 2000 else 0
    ids = torch.randint(low, vocab_size, (n, width), generator=generator)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    return ids * mask, mask


def outputs_agree(fp32: Tensor, bf16: Tensor, mask: Tensor) -> tuple[bool, float]:
    """(agree, smallest cosine) of each real token's hidden state: fp32 and bf16 [B, T, H], mask [B, T]."""
    real = mask.bool()
    cos = torch.nn.functional.cosine_similarity(fp32[real].float(), bf16[real].float(), dim=-1)
    worst = float(cos.min())
    return worst >= MIN_TOKEN_COSINE, worst


def _cpu_has_bf16() -> bool:
    from .train.precision import _cpu_has_bf16 as has_bf16

    return has_bf16()


def choose_inference_precision(encoder: torch.nn.Module, generator: torch.Generator | None = None) -> str:
    """ "bf16" when bf16 autocast runs ``encoder`` (a ``BertModel``) faster on this machine and its outputs
    agree with fp32's (:func:`outputs_agree` on :func:`probe_batch`), else "fp32".

    Off the CPU, or on a CPU without native bf16 GEMMs, "fp32" with nothing measured (pass "bf16" yourself
    on a GPU). The forward of each precision is timed alternately, medians of 3 rounds. Cached per
    machine, model class and size."""
    from .settings import INFERENCE_PRECISION
    from .tuning import choose, time_alternating

    device = next(encoder.parameters()).device
    if device.type != "cpu" or not _cpu_has_bf16():
        return "fp32"
    size = sum(p.numel() for p in encoder.parameters())
    name = f"inference_precision:{type(encoder).__name__}:{size}"

    def measure() -> tuple[str, dict[str, Any]]:
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        ids, mask = probe_batch(
            encoder.config.vocab_size, gen, max_seq_length=min(128, encoder.config.max_position_embeddings)
        )
        was_training = encoder.training
        encoder.eval()
        try:
            with torch.inference_mode():

                def run(bf16: bool) -> Tensor:
                    with inference_autocast("bf16" if bf16 else "fp32", "cpu"):
                        return encoder(ids, attention_mask=mask).last_hidden_state

                agree, worst = outputs_agree(run(False), run(True), mask)
                details: dict[str, Any] = {"min_token_cosine": round(worst, 6)}
                if not agree:
                    return "fp32", details | {
                        "reason": f"bf16 outputs disagree (cosine < {MIN_TOKEN_COSINE})"
                    }
                t = time_alternating({"fp32": lambda: run(False), "bf16": lambda: run(True)}, rounds=3)
        finally:
            encoder.train(was_training)
        details |= {k + "_ms": round(v * 1e3, 1) for k, v in t.items()}
        return ("bf16" if t["bf16"] * MIN_SPEEDUP <= t["fp32"] else "fp32"), details

    return choose(name, measure, override=INFERENCE_PRECISION)


def resolve_inference_precision(precision: str, encoder: torch.nn.Module) -> str:
    """``precision`` as run: "fp32" or "bf16" ("auto" measured by :func:`choose_inference_precision`)."""
    check_inference_precision(precision)
    return choose_inference_precision(encoder) if precision == "auto" else precision
