"""A/B of the fp32 GEMM backends (:data:`bertkit.kernels.gemm.BACKENDS`) on two training steps, in one
process: the ModernBERT MLM step of ``bench_modernbert`` and the BERT pre-training step of ``bench_pretrain``,
each against transformers, once per backend in the order given.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.ab_gemm_backend --backends onednn onednn_fwd \
        [--layers 3] [--step 16 128] [--sizes small] [--repeats 3] [--out F.json]

``--parts`` instead times the GEMMs alone, per shape (rows x in -> out, the BERT, ModernBERT and MLM-decoder
shapes): the forward, the input gradient and the weight gradient as backend "onednn" runs them against
``F.linear`` / ``torch.mm``, alternating rounds, medians in ms.

The machine's 1-minute load average is recorded before and after each row: on a shared machine a ratio is
only worth the load it was measured under.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from typing import Any

from bertkit.io import atomic_write_json
from bertkit.kernels import gemm

KEEP = ("name", "ratio", "ours_s", "ref_s", "check")


def _row(backend: str, bench: Any) -> dict[str, Any]:
    gemm.use_backend(backend)
    before = os.getloadavg()
    start = time.perf_counter()
    result = bench()
    row = {k: result.get(k) for k in KEEP}
    return row | {"backend": gemm.backend_name(), "load_before": before, "load_after": os.getloadavg(),
                  "wall_s": round(time.perf_counter() - start, 1)}  # fmt: skip


PART_SHAPES = ((2048, 256, 1024), (2048, 1024, 256), (2048, 512, 2048), (2048, 2048, 512), (2048, 768, 3072),
               (2048, 3072, 768), (2048, 768, 2304), (2048, 1152, 768), (512, 768, 30522), (512, 768, 50368))  # fmt: skip


def parts(rounds: int) -> dict[str, dict[str, float]]:
    """ms per GEMM of each part and shape: backend "onednn"'s against torch's (F.linear, torch.mm)."""
    import torch
    import torch.nn.functional as F

    from bertkit.tuning import time_alternating

    op = gemm.onednn_op()
    g = torch.Generator().manual_seed(0)
    out = {}
    for n, i, o in PART_SHAPES:
        x, w, b = torch.randn(n, i, generator=g), torch.randn(o, i, generator=g), torch.zeros(o)
        gr = torch.randn(n, o, generator=g)
        gx, gw = (True, False, False), (False, True, False)  # which gradient _dnn/_mm_backward compute
        options = {
            "fwd_dnn": partial(op, x, w, b, "none", [], ""),
            "fwd_torch": partial(F.linear, x, w, b),
            "gx_dnn": partial(gemm._dnn_backward, op, gx, False, x, w, gr, n),
            "gx_torch": partial(gemm._mm_backward, op, gx, False, x, w, gr, n),
            "gw_dnn": partial(gemm._dnn_backward, op, gw, False, x, w, gr, n),
            "gw_torch": partial(gemm._mm_backward, op, gw, False, x, w, gr, n),
        }
        t = time_alternating(options, rounds=rounds, warmup=1)
        out[f"{n}x{i}->{o}"] = {k: round(v * 1e3, 1) for k, v in t.items()}
        print(f"{n}x{i}->{o}", out[f"{n}x{i}->{o}"], flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    from .bench_modernbert import base_config, bench_pretrain_step
    from .bench_pretrain import bench_size

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", nargs="+", choices=gemm.BACKENDS, default=["onednn", "onednn_fwd"])
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--step", type=int, nargs=2, default=[16, 128], metavar=("BATCH", "SEQ"))
    p.add_argument("--sizes", nargs="*", default=["small"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parts", type=int, default=None, metavar="THREADS", help="time the GEMMs alone")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.parts is not None:
        import torch

        torch.set_num_threads(args.parts)
        before = os.getloadavg()
        ms = parts(args.repeats)
        if args.out:
            atomic_write_json(args.out, {"ms": ms, "load_before": before, "load_after": os.getloadavg()})
        return
    rows = []
    try:
        for backend in args.backends:
            step = partial(bench_pretrain_step, base_config(args.layers), *args.step, args.repeats)
            rows.append(_row(backend, step))
            print(json.dumps(rows[-1]), flush=True)
            for size in args.sizes:
                rows.append(_row(backend, partial(bench_size, size, repeats=args.repeats, warmup=1)))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        gemm.use_backend(None)
    if args.out:
        atomic_write_json(args.out, {"argv": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
