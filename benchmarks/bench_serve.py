"""Serving on loopback: ``bertkit serve`` against the server a user would write first.

    .venv/bin/python -m benchmarks.bench_serve [--quick] [--threads 2]

Three servers, one at a time, each a real uvicorn process on 127.0.0.1 with the same torch threads:

- ours, batching on: ``bertkit serve MiniLM`` (cross-request dynamic batching, defaults);
- ours, batching off: the same with ``--no-batching`` (one request per model call);
- the baseline: sentence-transformers ``SentenceTransformer.encode`` behind the same FastAPI/uvicorn,
  one request at a time (a lock around ``encode``).

All three run at once and are loaded in turn (rotating order, ``--repeats`` rounds), so a change in the
machine's load hits every side alike. Each gets ``POST /embed`` requests of one real STS-B dev sentence each from ``c`` client threads (keep-alive
connections) at concurrency 1, 16 and 64. Reported per level: requests/s, p50/p99 latency, errors (non-200)
and lost requests (no answer); the ratio is ours (batching on) over the baseline's requests/s. Goal: >= 3x at
c=64 with a p99 no worse. Before timing, the servers' embeddings of the same sentences are checked equal.
"""

# No `from __future__ import annotations`: FastAPI must resolve the baseline's request model (defined in
# baseline_app) from a real annotation.
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.serving.launch import ServerProcess

from .inputs import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
STS_DEV = SHARED_DATA / "glue" / "STS-B" / "dev.tsv"
LEVELS = (1, 16, 64)


# ------------------------------------------------------------------------------------------ baseline
def baseline_app(model_dir: str):
    """sentence-transformers behind FastAPI, one request at a time: the plain server a user writes."""
    from fastapi import FastAPI
    from pydantic import BaseModel
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir, device="cpu")
    lock = threading.Lock()
    app = FastAPI()

    class Req(BaseModel):
        texts: list[str]

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/embed")
    def embed(req: Req) -> dict:
        with lock:
            vecs = model.encode(req.texts, convert_to_numpy=True)
        return {"embeddings": vecs.tolist()}

    return app


def _serve_baseline(model_dir: str, port: int) -> None:
    import uvicorn

    uvicorn.run(baseline_app(model_dir), host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ------------------------------------------------------------------------------------------ harness
def _post(conn: http.client.HTTPConnection, path: str, body: dict) -> tuple[int, Any]:
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    return r.status, json.loads(data) if r.status == 200 else None


def _start(cmd: list[str], threads: int) -> ServerProcess:
    env = {"OMP_NUM_THREADS": str(threads), "RAYON_NUM_THREADS": str(threads)}
    env["HF_HUB_OFFLINE"] = os.environ.get("HF_HUB_OFFLINE", "1")
    return ServerProcess(cmd, env=env, cwd=ROOT)


def load(port: int, sentences: list[str], concurrency: int, n_requests: int) -> dict[str, Any]:
    """``n_requests`` one-sentence requests from ``concurrency`` threads; latencies and counts."""
    latencies: list[float] = []
    errors = lost = 0
    lock = threading.Lock()
    counter = iter(range(n_requests))

    def worker() -> None:
        nonlocal errors, lost
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            t0 = time.perf_counter()
            try:
                status, _ = _post(conn, "/embed", {"texts": [sentences[i % len(sentences)]]})
            except (OSError, http.client.HTTPException, ValueError):
                with lock:
                    lost += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                continue
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                errors += status != 200
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    lat = sorted(latencies)
    return {
        "requests": n_requests,
        "req_per_s": len(lat) / wall,
        "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan"),
        "errors": errors,
        "lost": lost + (n_requests - len(lat) - lost),
    }


def machine() -> dict[str, Any]:
    """CPU model, cores, load and torch version, read directly (kept independent of common.environment)."""
    import torch

    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
    }


def _pool(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one server at one level: the median rate, the worst p99, the median p50, summed counts."""
    return {
        "rounds": len(rounds),
        "requests": sum(r["requests"] for r in rounds),
        "req_per_s": statistics.median(r["req_per_s"] for r in rounds),
        "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
        "p99_ms": max(r["p99_ms"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "lost": sum(r["lost"] for r in rounds),
    }


def _embeddings(port: int, texts: list[str]) -> np.ndarray:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    status, body = _post(conn, "/embed", {"texts": texts})
    conn.close()
    if status != 200:
        raise RuntimeError(f"/embed answered {status}")
    return np.array(body["embeddings"], dtype=np.float32)


def run(args: Any) -> list[dict[str, Any]]:
    from bertkit.retrieval import read_sts

    from .inputs import NoData, minilm_dir, minilm_weights

    try:
        model = str(minilm_dir())
        if not STS_DEV.is_file():
            raise NoData(f"STS-B dev not found at {STS_DEV}")
    except NoData as e:
        return [{"name": "serve embed", "skipped": str(e)}]
    sentences = sorted({s for r in read_sts(STS_DEV) for s in r[:2]})
    random.Random(0).shuffle(sentences)
    threads = getattr(args, "threads", 2)
    quick = getattr(args, "quick", False)
    per_level = {c: (max(2 * c, 16) if quick else max(4 * c, 32)) for c in LEVELS}
    repeats = getattr(args, "repeats", None) or (1 if quick else 3)
    servers = {
        "batching": [sys.executable, "-m", "bertkit", "serve", model, "--log-level", "warning"],
        "no_batching": [
            sys.executable,
            "-m",
            "bertkit",
            "serve",
            model,
            "--log-level",
            "warning",
            "--no-batching",
        ],
        "baseline": [sys.executable, "-m", "benchmarks.bench_serve", "--baseline-server", model],
    }
    # All three servers run at once (idle when not loaded) and are loaded in turn, level by level, in a
    # rotating order, repeated: on a shared machine a load change then hits every side alike.
    procs: dict[str, ServerProcess] = {}
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {name: {c: [] for c in LEVELS} for name in servers}
    check = 0.0
    try:
        for name, cmd in servers.items():
            procs[name] = _start(cmd, threads)
        reference = _embeddings(procs["baseline"].port, sentences[:16])
        for name, proc in procs.items():
            diff = float(np.abs(_embeddings(proc.port, sentences[:16]) - reference).max())
            if diff > 1e-4:
                return [
                    {
                        "name": "serve embed",
                        "error": f"{name} embeddings differ from the baseline's by {diff:.2e}",
                    }
                ]
            check = max(check, diff)
            load(proc.port, sentences, 4, 16)  # warm-up
        order = list(servers)
        for r in range(repeats):
            for c in LEVELS:
                for name in order[r % 3 :] + order[: r % 3]:
                    rounds[name][c].append(load(procs[name].port, sentences, c, per_level[c]))
    finally:
        for proc in procs.values():
            proc.stop()
    measured = {name: {c: _pool(rounds[name][c]) for c in LEVELS} for name in servers}
    rows = []
    for c in LEVELS:
        ours, plain, base = measured["batching"][c], measured["no_batching"][c], measured["baseline"][c]
        row = {
            "name": f"serve /embed c={c}",
            "unit": "req",
            "ours_per_s": ours["req_per_s"],
            "ref_per_s": base["req_per_s"],
            "ratio": ours["req_per_s"] / base["req_per_s"],
            "ours": ours,
            "no_batching": plain,
            "baseline": base,
            "check": check,
            "threads": threads,
            "minilm_weights": minilm_weights(Path(model)),
        }
        if c == max(LEVELS):
            row["goal"] = 3.0
            row["meets_goal"] = row["ratio"] >= 3.0 and ours["p99_ms"] <= base["p99_ms"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    if argv is None and "--baseline-server" in sys.argv:
        p = argparse.ArgumentParser()
        p.add_argument("--baseline-server", required=True)
        p.add_argument("--port", type=int, required=True)
        a = p.parse_args()
        _serve_baseline(a.baseline_server, a.port)
        return
    argv = sys.argv[1:] if argv is None else argv
    if "--out" in argv:  # a results file for docs/results/serving-measurements.md
        i = argv.index("--out")
        out = Path(argv[i + 1])
        p = argparse.ArgumentParser()
        p.add_argument("--quick", action="store_true")
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--repeats", type=int, default=None)
        args = p.parse_args(argv[:i] + argv[i + 2 :])
        from bertkit.io import atomic_write_json

        from .common import pin_threads

        pin_threads(args.threads)
        load_before = os.getloadavg()
        rows = run(args)
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        atomic_write_json(
            out,
            {
                "command": "python -m benchmarks.bench_serve " + " ".join(argv),
                "commit": commit.stdout.strip(),
                "environment": {**machine(), "load_average_before": load_before},
                "rows": rows,
            },
        )
        print(json.dumps(rows, indent=1))
        return
    from .common import suite_main

    suite_main(run, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    main()
