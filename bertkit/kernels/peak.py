"""The machine's GEMM peak: the ceiling ``make bench`` reports model FLOP/s against, and the per-core speed an
experiment sitting records so that CPU seconds from different hosts can be compared."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def gemm_peak(dtype: torch.dtype = torch.float32, n: int = 2048, seconds: float = 1.5) -> dict[str, Any]:
    """FLOP/s of the fastest of repeated n x n x n matmuls over about ``seconds`` per kernel, at the threads
    as set, taking the faster of ``torch.mm`` and oneDNN's linear where this build has it (on AMD ``torch.mm``
    takes MKL's generic path while bertkit's linears may run on oneDNN: a peak from ``torch.mm`` alone would
    read below what the model reaches)."""
    from bertkit.kernels.gemm import onednn_op  # looked up at call time: tests switch oneDNN off

    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    kernels = {"torch.mm": lambda: torch.mm(a, b, out=out)}
    op = onednn_op()
    if op is not None:  # y = a b^T: the same n^3 multiply-adds
        kernels["onednn"] = lambda: op(a, b, None, "none", [], "")
    best = {name: fastest(run, seconds) for name, run in kernels.items()}
    kernel = min(best, key=lambda name: best[name][0])
    per_kernel = {name: 2.0 * n**3 / t for name, (t, _) in best.items()}
    return {"dtype": str(dtype).replace("torch.", ""), "n": n, "runs": best[kernel][1], "kernel": kernel,
            "flops_per_s": per_kernel[kernel], "per_kernel": per_kernel}  # fmt: skip


def fastest(run: Callable[[], Any], seconds: float) -> tuple[float, int]:
    """(the fastest of repeated calls of ``run`` over about ``seconds``, at least 3, after one warm-up; calls)."""
    run()  # warm-up: kernel selection, page faults
    best, spent, runs = float("inf"), 0.0, 0
    while spent < seconds or runs < 3:
        t0 = time.perf_counter()
        run()
        dt = time.perf_counter() - t0
        best, spent, runs = min(best, dt), spent + dt, runs + 1
    return best, runs


def per_core_gflops(n: int = 256, seconds: float = 0.05) -> float:
    """fp32 GEMM GFLOP/s on one thread (:func:`gemm_peak` at a cache-sized n): how fast one core of this host
    is, next to its CPU model name, which hosts of very different speed share. The thread count is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return gemm_peak(torch.float32, n=n, seconds=seconds)["flops_per_s"] / 1e9
    finally:
        torch.set_num_threads(threads)
