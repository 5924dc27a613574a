"""Short-sequence attention, A/B: bertkit's encoder with attention over short groups as two batched GEMMs
(``BERTKIT_ATTENTION=matmul``) against the fused SDPA kernel (``sdpa``), beside transformers, in one process.

    .venv/bin/python -m benchmarks.ab_attention [--threads 2] [--rounds 5] [--out FILE]

The inputs are ``benchmarks.bench_encoder``'s (batches of 32 real SST-2 and CoNLL-2003 sentences; MiniLM-L6
with its real weights, a BERT-base-sized random model). Before timing, each batch's last hidden state from
both paths must agree within 1e-5 on the real tokens, and the matmul path's with transformers' within the
bench's 1e-4. The three options then alternate, each in turn first, ``--rounds`` times; the row gives the
median seconds per pass over the batches and each path's ratio to transformers.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from bertkit.io import atomic_write_json
from bertkit.kernels import attention
from bertkit.tuning import time_alternating

from .bench_encoder import _LABELS, ATOL, _models, _tokenizer, batch_count, sentence_batches
from .common import check_close, environment, pin_threads

PATHS_ATOL = 1e-5


def _pass(model, batches: list[dict], path: str | None) -> Callable[[], None]:
    def run() -> None:
        if path is not None:
            attention.use_attention(path)
        with torch.inference_mode():
            for b in batches:
                model(**b)

    return run


def ab_row(ours, ref, batches: list[dict], name: str, rounds: int) -> dict[str, Any]:
    """One row: the two attention paths of ``ours`` and the reference ``ref`` on ``batches``."""
    try:
        with torch.inference_mode():
            for i, b in enumerate(batches):
                attention.use_attention("matmul")
                fast = ours(**b).last_hidden_state
                attention.use_attention("sdpa")
                fused = ours(**b).last_hidden_state
                check_close(fast, fused, PATHS_ATOL, f"{name} batch {i}: matmul vs sdpa", b["attention_mask"])
                want = ref(**b).last_hidden_state
                check_close(
                    fast, want, ATOL, f"{name} batch {i}: matmul vs transformers", b["attention_mask"]
                )
        options = {p: _pass(ours, batches, p) for p in ("matmul", "sdpa")} | {
            "transformers": _pass(ref, batches, None)
        }
        t = time_alternating(options, rounds=rounds, warmup=1)
    finally:
        attention.use_attention(None)
    return {
        "name": name,
        "batches": len(batches),
        "seconds": {k: round(v, 4) for k, v in t.items()},
        "ratio_vs_transformers": {p: round(t["transformers"] / t[p], 3) for p in ("matmul", "sdpa")},
        "matmul_speedup_over_sdpa": round(t["sdpa"] / t["matmul"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="write the rows and the machine here as JSON")
    args = ap.parse_args(argv)
    pin_threads(args.threads)
    tok = _tokenizer()
    rows = []
    for size in ("minilm", "base"):
        with tempfile.TemporaryDirectory() as tmp:
            ours, ref = _models(size, tmp)
        for dataset in ("sst2", "conll"):
            batches = [tok(b, max_length=128) for b in sentence_batches(dataset, batch_count(size))]
            row = ab_row(ours, ref, batches, f"encoder {_LABELS[size]} {dataset} b32", args.rounds)
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {
        "command": f"python -m benchmarks.ab_attention --threads {args.threads} --rounds {args.rounds}",
        "environment": environment(),
        "rows": rows,
    }
    if args.out:
        atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
