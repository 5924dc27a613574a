"""Vector-index benchmark: 1,000,000 random-projection vectors of dimension 384, each index type against
exact search (build time, memory, queries/s, recall@10).

    .venv/bin/python -m benchmarks.bench_index [--quick] [--threads 2] [--n 1000000] [--out F.json]

The vectors: 2,000 cluster centres in a 64-dimensional latent space, points scattered around them, mapped
to 384 dimensions by one random Gaussian projection, plus a little isotropic noise, L2-normalised (so inner
product = cosine). This is the shape of sentence embeddings (a low intrinsic dimension inside a larger
space); uniformly random 384-d vectors have no neighbours worth the name and no index can beat a scan on
them. Queries are fresh draws from the same distribution, never base rows.

Exact reference: ``bertkit.index.exact_search`` (numpy, chunked) and FAISS ``IndexFlatIP`` (BLAS); the
two must return the same neighbours (checked on the first queries), and the faster of the two is the
exact QPS every approximate index is compared with (``ratio`` = its QPS / exact QPS). All searches take
the whole query batch at once with the pinned number of threads. Memory = growth of the process's
resident set while the index is built (the base array itself is shared and not counted).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_vectors(
    n: int, dim: int, rng: np.random.Generator, latent: int = 64, centres: int = 2000
) -> np.ndarray:
    """[n, dim] float32 unit vectors: clustered latent points under a random projection (see the docstring)."""
    proj = rng.standard_normal((latent, dim)).astype(np.float32) / np.sqrt(latent)
    c = rng.standard_normal((centres, latent)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        z = c[rng.integers(0, centres, m)] + 0.5 * rng.standard_normal((m, latent)).astype(np.float32)
        x = z @ proj + 0.05 * rng.standard_normal((m, dim)).astype(np.float32)
        out[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _recall(found: np.ndarray, truth: np.ndarray, k: int = 10) -> float:
    return float(np.mean([len(set(f[:k].tolist()) & set(t[:k].tolist())) / k for f, t in zip(found, truth)]))


def _timed_search(search, q: np.ndarray, k: int, min_seconds: float = 2.0) -> tuple[float, np.ndarray]:
    """(queries per second, ids [Q, k]) of repeated whole-batch searches for at least ``min_seconds``."""
    _, ids = search(q[: min(len(q), 50)], k)  # warm-up
    t0, done = time.perf_counter(), 0
    while True:
        _, ids = search(q, k)
        done += len(q)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return done / elapsed, ids


def run(args: Any) -> list[dict[str, Any]]:
    import faiss

    from bertkit.index import exact_search
    from bertkit.index.backends import FaissBackend

    quick = bool(getattr(args, "quick", False))
    n = int(getattr(args, "n", None) or (100_000 if quick else 1_000_000))
    threads = int(getattr(args, "threads", 2) or 2)
    min_s = float(getattr(args, "min_seconds", None) or 2.0)  # timing window per measurement
    faiss.omp_set_num_threads(threads)
    dim, k, nq = int(getattr(args, "dim", None) or 384), 10, 1000
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    base = make_vectors(n + nq, dim, rng)
    base, q = base[:n], base[n:]
    gen_s = time.perf_counter() - t0

    rows: list[dict[str, Any]] = []
    partial = getattr(
        args, "partial_out", None
    )  # rows so far, rewritten after each one (a cut-short run keeps them)

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        if partial:
            from bertkit.io import atomic_write_json

            atomic_write_json(partial, {"complete": False, "results": rows})

    common = {"suite": "index", "n": n, "dim": dim, "queries": nq, "k": k, "threads": threads}

    # exact references: numpy (ours) and FAISS flat; the same neighbours
    qps_np, truth_np = _timed_search(
        lambda x, kk: exact_search(base, x, kk), q[:200], k, min_seconds=min_s / 2
    )
    flat = faiss.IndexFlatIP(dim)
    t0 = time.perf_counter()
    flat.add(base)
    flat_build = time.perf_counter() - t0
    qps_flat, truth = _timed_search(flat.search, q, k, min_s)
    agree = _recall(truth_np, truth[:200])
    if agree < 0.999:
        from .common import Mismatch

        raise Mismatch(f"numpy exact and FAISS flat disagree: overlap@10 {agree:.4f}")
    exact_qps = max(qps_np, qps_flat)
    emit(
        {
            "name": f"index exact numpy {n // 1000}k",
            **common,
            "unit": "q/s",
            "ours": round(qps_np, 1),
            "reference": round(qps_flat, 1),
            "ratio": qps_np / qps_flat,
            "recall@10": 1.0,
            "note": "reference = FAISS IndexFlatIP",
            "vectors_seconds": round(gen_s, 1),
        }
    )
    emit(
        {
            "name": f"index flat {n // 1000}k",
            **common,
            "unit": "q/s",
            "ours": round(qps_flat, 1),
            "reference": round(exact_qps, 1),
            "ratio": qps_flat / exact_qps,
            "recall@10": _recall(truth, truth),
            "build_s": round(flat_build, 2),
            "memory_mb": round(base.nbytes / 2**20, 1),
        }
    )
    del flat
    gc.collect()

    nlist = min(1024 if quick else 4096, max(1, n // 50))  # k-means wants >= 39 points per cell
    configs: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
        ("hnsw", {"M": 32, "ef_construction": 80}, [{"ef_search": e} for e in (32, 64, 128, 256)]),
        (
            "ivfpq",
            {"nlist": nlist, "pq_m": dim // 8, "refine": 4.0, "train_size": 200_000},
            [{"nprobe": p} for p in (8, 16, 32, 64)],
        ),
        (
            "ivfpq",
            {"nlist": nlist, "pq_m": dim // 8, "refine": 0, "train_size": 200_000},
            [{"nprobe": p} for p in (16, 64)],
        ),
    ]
    ids = np.arange(n, dtype=np.int64)
    for kind, params, sweep in configs:
        gc.collect()
        rss0 = _rss_mb()
        t0 = time.perf_counter()
        backend = FaissBackend(dim, kind, **params)
        if backend.needs_training:
            sample = base[rng.choice(n, size=min(n, params["train_size"]), replace=False)]
            backend.train(sample)
        backend.add(ids, base)
        build_s = time.perf_counter() - t0
        mem = _rss_mb() - rss0
        label = kind + ("" if kind != "ivfpq" else "+refine" if params["refine"] else "")
        for setting in sweep:
            backend.params.update(setting)
            backend._apply_search_params()
            qps, found = _timed_search(backend.search, q, k, min_s)
            rec = _recall(found, truth)
            emit(
                {
                    "name": f"index {label} {n // 1000}k {json.dumps(setting)}",
                    **common,
                    "unit": "q/s",
                    "ours": round(qps, 1),
                    "reference": round(exact_qps, 1),
                    "ratio": qps / exact_qps,
                    "recall@10": round(rec, 4),
                    "build_s": round(build_s, 1),
                    "memory_mb": round(mem, 1),
                    "params": {**params, **setting},
                    "goal": 20.0,
                    "meets_goal": bool(rec >= 0.95 and qps >= 20 * exact_qps),
                }
            )
        del backend
    return rows


def main(argv: list[str] | None = None) -> None:
    from .common import environment, pin_threads

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--partial-out", type=Path, default=None, help="rows so far, rewritten after each")
    args = p.parse_args(argv)
    pin_threads(args.threads)
    rows = run(args)
    for r in rows:
        print(
            f"{r['name']:<52} {r['ours']:>10.1f} q/s  recall@10 {r['recall@10']:.4f}  ratio {r['ratio']:.2f}"
        )
    if args.out:
        from bertkit.io import atomic_write_json

        atomic_write_json(
            args.out,
            {
                "environment": environment(),
                "command": "python -m benchmarks.bench_index " + " ".join(argv or []),
                "results": rows,
            },
        )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
