"""Why a row runs below half the GEMM peak of its precision: measured, not guessed.

A row that reports its model FLOP/s as a fraction of the machine's peak (``ours_fraction_of_peak``) and
names the largest GEMM of its step (``gemm_shape``: ``[m, k, n]``, e.g. the feed-forward's tokens x hidden x
feed-forward size) gets, when it is under :data:`HALF`, that one GEMM timed alone at the row's precision and
threads. Its FLOP/s over the peak is the best the step could reach if it did nothing but GEMMs of that shape:

- that *shape ceiling* is itself under half the peak: the model's matrices are too small for this CPU's GEMM
  to run near its peak (more rows per GEMM, a wider model or another kernel are the levers);
- the ceiling is higher: the missing time is outside the GEMMs (attention's softmax and masking,
  normalisation, element-wise ops, the optimizer step, data), and the row says what share of the step that is
  at the ceiling's speed.

A machine busier than the threads the row ran on (load average at the start) is named too: its numbers are
low for a reason the code does not own.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from bertkit.kernels.peak import fastest

HALF = 0.5
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@cache
def shape_flops(m: int, k: int, n: int, dtype: str, seconds: float = 0.5) -> float:
    """FLOP/s of the fastest of repeated ``[m, k] @ [k, n]`` products in ``dtype`` ("fp32" or "bf16") at the
    threads as set (one measurement per shape and dtype per process)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(DTYPES[dtype])
    b = torch.randn(k, n, generator=g).to(DTYPES[dtype])
    out = torch.empty(m, n, dtype=DTYPES[dtype])
    best, _ = fastest(lambda: torch.mm(a, b, out=out), seconds)
    return 2.0 * m * k * n / best


def reason(
    fraction: float, ceiling: float | None, shape: list[int] | None, dtype: str, busy: str | None
) -> str:
    """One sentence on why a row reached ``fraction`` of its ``dtype`` peak; ``ceiling``: its largest GEMM's
    own fraction of that peak (None where the row names no shape)."""
    parts = []
    if ceiling is None:
        why = "the row names no GEMM shape" if shape is None else "the peaks came from another run's file"
        parts.append(f"the cause is not measured here ({why})")
    elif ceiling < HALF:
        m, k, n = shape
        parts.append(
            f"its largest GEMM ({m}x{k}x{n}, {dtype}) alone reaches only {ceiling:.0%} of the peak here: the "
            "matrices are too small for this CPU's GEMM to run near its peak"
        )
    else:
        outside = 1.0 - fraction / ceiling
        parts.append(
            f"its largest GEMM alone reaches {ceiling:.0%} of the peak, so about {outside:.0%} of the step goes "
            "to work outside the GEMMs (attention softmax and masks, normalisation, element-wise ops, "
            "optimizer, data)"
        )
    if busy:
        parts.append(busy)
    return "; ".join(parts)


def explain(row: dict[str, Any], env: dict[str, Any], measure: bool = True) -> None:
    """Add ``below_half_reason`` (and ``ours_shape_ceiling``, the largest GEMM's fraction of the peak) to a
    row under half its precision's peak; rows at or above half, or without a fraction, are left alone.
    ``measure=False`` (peaks read from another run's file) explains without timing a GEMM here."""
    fraction = row.get("ours_fraction_of_peak")
    if fraction is None or fraction >= HALF:
        return
    dtype = row.get("ours_peak_dtype", "fp32")
    peak = (env.get("gemm_peak") or {}).get(dtype, {}).get("flops_per_s")
    shape = row.get("gemm_shape")
    ceiling = None
    if measure and peak and shape and dtype in DTYPES:
        ceiling = shape_flops(*(int(x) for x in shape), dtype) / peak
        row["ours_shape_ceiling"] = ceiling
    load = (env.get("load_average") or [None])[0]
    threads = env.get("threads")
    busy = (
        f"the machine was busy (load {load:.1f} on {threads} threads at the start)"
        if load is not None and threads and load > threads
        else None
    )
    row["below_half_reason"] = reason(fraction, ceiling, shape, dtype, busy)


def largest_gemm(tokens: int, hidden: int, intermediate: int) -> list[int]:
    """A BERT layer's largest GEMM for ``tokens`` rows: the feed-forward's ``[tokens, hidden] @ [hidden,
    intermediate]``."""
    return [int(tokens), int(hidden), int(intermediate)]
