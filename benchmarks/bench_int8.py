"""``bertkit serve --int8`` and ``bertkit export onnx --int8`` on all-MiniLM-L6-v2: model size, encoding speed
and the STS-B dev Spearman, float against int8, measured side by side in one run (the server's own service,
no HTTP; and the exported graphs under onnxruntime).

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


def _onnx_encoder(path: Path, svc, sentences: list[str], threads: int):
    """Mean-pooled, normalised vectors of ``sentences`` from an exported encoder graph (batches of 64 by length)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    ids = svc.encoder.tokenize(sentences)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))

    def run() -> np.ndarray:
        out = np.zeros((len(ids), svc.encoder.dim), dtype=np.float32)
        for start in range(0, len(order), 64):
            idx = order[start : start + 64]
            width = max(len(ids[i]) for i in idx)
            x = np.zeros((len(idx), width), dtype=np.int64)
            m = np.zeros_like(x)
            for r, i in enumerate(idx):
                x[r, : len(ids[i])] = ids[i]
                m[r, : len(ids[i])] = 1
            h = session.run(
                ["last_hidden_state"],
                {"input_ids": x, "attention_mask": m, "token_type_ids": np.zeros_like(x)},
            )[0]
            v = (h * m[..., None]).sum(1) / m.sum(1, keepdims=True)
            out[idx] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out

    return run


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
    encoders = {
        name: (lambda svc=svc: svc.embed(sentences, normalize=True)[0]) for name, svc in services.items()
    }
    onnx_sizes = {}
    try:  # the same model exported to ONNX, float and int8 (`bertkit export onnx [--int8]`), run by onnxruntime
        import tempfile

        from bertkit.export import export_onnx

        tmp = Path(tempfile.mkdtemp(prefix="bench-int8-"))
        for name, q in (("onnx_float", False), ("onnx_int8", True)):
            path = tmp / f"{name}.onnx"
            export_onnx(minilm_dir(), path, encoder_only=True, verify=False, int8=q)
            onnx_sizes[name] = path.stat().st_size
            encoders[name] = _onnx_encoder(path, services["float"], sentences, args.threads)
    except ImportError as e:
        out["onnx"] = f"skipped: {e}"
    times: dict[str, list[float]] = {k: [] for k in encoders}
    vectors = {}
    for r in range(args.repeats):
        for name in encoders if r % 2 == 0 else list(encoders)[::-1]:
            t0 = time.perf_counter()
            vectors[name] = encoders[name]()
            times[name].append(time.perf_counter() - t0)
    index = {s: i for i, s in enumerate(sentences)}
    gold = np.array([r[2] for r in rows])
    for name in encoders:
        v = vectors[name]
        cos = np.array([float(v[index[a]] @ v[index[b]]) for a, b, _ in rows])
        if name in services:
            svc = services[name]
            size = _size(svc._int8_encoder if name == "int8" else svc.encoder.model)
        else:
            size = onnx_sizes[name]
        out[name] = {
            "bytes": size,
            "seconds": min(times[name]),
            "sentences_per_s": len(sentences) / min(times[name]),
            "sts_b_dev_spearman": 100 * spearman(cos, gold),
        }
    if "onnx_int8" in out:
        out["onnx_size_ratio"] = out["onnx_float"]["bytes"] / out["onnx_int8"]["bytes"]
        out["onnx_speedup"] = out["onnx_float"]["seconds"] / out["onnx_int8"]["seconds"]
        out["onnx_spearman_change"] = (
            out["onnx_int8"]["sts_b_dev_spearman"] - out["onnx_float"]["sts_b_dev_spearman"]
        )
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
