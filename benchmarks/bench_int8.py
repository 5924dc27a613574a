"""``bertkit serve --int8`` on all-MiniLM-L6-v2: model size, encoding speed and the STS-B dev Spearman, float
against int8, measured side by side in one run through the server's own service (no HTTP).

    .venv/bin/python -m benchmarks.bench_int8 [--threads 2] [--out docs/serving-int8.json]

Size: the serialised state dict of the float model and of the int8 one (``torch.save``). Speed: all STS-B
dev sentences encoded in batches (best of ``--repeats``, sides alternated). Metric: Spearman x 100 of the
cosine similarities against the gold scores (``bertkit.retrieval.evaluate_sts``'s definition).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
STS_DEV = ROOT.parent / "shared" / "data" / "glue" / "STS-B" / "dev.tsv"


def _size(module: torch.nn.Module) -> int:
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.tell()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from bertkit.retrieval import read_sts, spearman
    from bertkit.serving.limits import Limits
    from bertkit.serving.service import InferenceService

    from .bench_serve import machine
    from .inputs import minilm_dir

    rows = read_sts(STS_DEV)
    sentences = sorted({s for r in rows for s in r[:2]})
    limits = Limits(max_batch_size=len(sentences), max_request_tokens=1 << 40)
    services = {
        "float": InferenceService(minilm_dir(), limits=limits),
        "int8": InferenceService(minilm_dir(), limits=limits, int8=True),
    }
    out: dict = {"model": "all-MiniLM-L6-v2", "sentences": len(sentences), "pairs": len(rows)}
    times: dict[str, list[float]] = {k: [] for k in services}
    vectors = {}
    for r in range(args.repeats):
        for name in services if r % 2 == 0 else list(services)[::-1]:
            t0 = time.perf_counter()
            vecs, _ = services[name].embed(sentences, normalize=True)
            times[name].append(time.perf_counter() - t0)
            vectors[name] = vecs
    index = {s: i for i, s in enumerate(sentences)}
    gold = np.array([r[2] for r in rows])
    for name, svc in services.items():
        v = vectors[name]
        cos = np.array([float(v[index[a]] @ v[index[b]]) for a, b, _ in rows])
        model = svc._int8_encoder if name == "int8" else svc.encoder.model
        out[name] = {
            "bytes": _size(model),
            "seconds": min(times[name]),
            "sentences_per_s": len(sentences) / min(times[name]),
            "sts_b_dev_spearman": 100 * spearman(cos, gold),
        }
    out["size_ratio"] = out["float"]["bytes"] / out["int8"]["bytes"]
    out["speedup"] = out["float"]["seconds"] / out["int8"]["seconds"]
    out["spearman_change"] = out["int8"]["sts_b_dev_spearman"] - out["float"]["sts_b_dev_spearman"]
    out["max_abs_diff"] = float(np.abs(vectors["float"] - vectors["int8"]).max())
    out["environment"] = machine()
    out["threads"] = args.threads
    out["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    out["command"] = "python -m benchmarks.bench_int8 " + " ".join(argv if argv is not None else [])
    for svc in services.values():
        svc.close()
    print(json.dumps(out, indent=2))
    if args.out:
        from bertkit.io import atomic_write_json

        atomic_write_json(args.out, out)
    return out


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
