"""Training attention under bf16 autocast, computed in bf16 or in fp32, on this CPU: both of bertkit's attention
paths, forward and backward, timed both ways after checking that the two ways agree.

``.venv/bin/python -m benchmarks.attention_precision --threads 2 --out docs/perf/attention-precision-....json``

bertkit's training attention (:mod:`bertkit.kernels.attention`) takes one of two paths: PyTorch's fused SDPA
when there is no attention dropout (ModernBERT), and the math path with bertkit's dropout mask on the
probabilities when there is (BERT's 0.1). Under bf16 autocast either would compute in bf16. For the fused path
bertkit makes a per-machine choice (``bertkit tune``: bf16, or q, k, v cast up to fp32 and the output cast
back); the math path always stays in bf16. This benchmark times both paths both ways at BERT-mini and
BERT-small shapes (half of the sequences padded by a quarter), so that the evidence for each is on file.
Each row first checks the two ways' outputs and query gradients against each other within bf16 rounding
(the dropout masks are the same: the same seed draws them).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.common import check_close, environment, pin_threads
from bertkit.io import atomic_write_json
from bertkit.kernels.attention import _attention_with_dropout
from bertkit.tuning import time_alternating

SHAPES = {"mini": (32, 4, 128, 64), "small": (32, 8, 128, 64)}  # batch, heads, tokens, head size
PATHS = {"fused": 0.0, "dropout": 0.1}  # path -> attention dropout
BF16_TOLERANCE = 0.05  # max |difference| of outputs and gradients between the ways, values of order 1


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, p: float) -> Tensor:
    """The path a training step takes for dropout ``p``: [B, heads, T, d] -> [B, heads, T, d]."""
    if p > 0:
        return _attention_with_dropout(q, k, v, mask, False, p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _step(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, grad: Tensor, p: float, in_fp32: bool
) -> Callable[[], Tensor]:
    """Forward and backward of one training attention call under bf16 autocast; returns the bf16 output."""

    def run() -> Tensor:
        q.grad = k.grad = v.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if in_fp32:
                with torch.autocast("cpu", enabled=False):
                    out = _attention(q.float(), k.float(), v.float(), mask, p).to(torch.bfloat16)
            else:
                out = _attention(q, k, v, mask, p)
        out.backward(grad)
        return out.detach()

    return run


def measure(shape: tuple[int, int, int, int], path: str, rounds: int, seed: int = 0) -> dict[str, Any]:
    """One row: the two ways' agreement, then their median milliseconds per forward + backward."""
    b, heads, t, d = shape
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, heads, t, d, generator=g).bfloat16().requires_grad_() for _ in range(3))
    grad = torch.randn(b, heads, t, d, generator=g).bfloat16()
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1::2, ..., 3 * t // 4 :] = False
    p = PATHS[path]
    ways = {"bf16": _step(q, k, v, mask, grad, p, False), "fp32": _step(q, k, v, mask, grad, p, True)}
    outputs, grads = {}, {}
    for name, run in ways.items():
        with torch.random.fork_rng():  # the same dropout mask both ways, the caller's generator untouched
            torch.manual_seed(seed)
            outputs[name] = run()
        grads[name] = q.grad.clone()
    out_diff = check_close(outputs["fp32"], outputs["bf16"], BF16_TOLERANCE, f"{path} attention output")
    grad_diff = check_close(grads["fp32"], grads["bf16"], BF16_TOLERANCE, f"{path} attention query gradient")
    with torch.random.fork_rng():
        times = time_alternating(ways, rounds=rounds)
    return {
        "path": path,
        "attention_dropout": p,
        "shape": list(shape),
        "bf16_ms": round(times["bf16"] * 1e3, 3),
        "fp32_ms": round(times["fp32"] * 1e3, 3),
        "faster": min(times, key=times.__getitem__),
        "max_abs_diff_output": out_diff,
        "max_abs_diff_query_grad": grad_diff,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.attention_precision", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--sizes", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES))
    p.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=sorted(PATHS))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--batch-size", type=int, default=None, help="override the shapes' batch (e.g. for a quick run)"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    pin_threads(args.threads)
    rows = []
    for size in args.sizes:
        shape = SHAPES[size] if args.batch_size is None else (args.batch_size, *SHAPES[size][1:])
        for path in args.paths:
            row = {"size": size, **measure(shape, path, args.rounds)}
            print(json.dumps(row))
            rows.append(row)
    command = "python -m benchmarks.attention_precision " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    atomic_write_json(Path(args.out), {"environment": environment(), "command": command, "rows": rows})


if __name__ == "__main__":
    main()
