"""``bertkit serve --int8`` and ``bertkit export onnx --int8`` on all-MiniLM-L6-v2: model size, encoding speed
and the STS-B dev Spearman, float against int8, measured side by side in one run (the server's own service,
no HTTP; and the exported graphs under onnxruntime).

    .venv/bin/python -m benchmarks.bench_int8 [--threads 1] [--repeats 3] [--out docs/results/serving-int8.json]

Size: the serialised state dict of the float model and of the int8 one (``torch.save``). Speed: all STS-B
dev sentences, paired: chunk by chunk (one service request of ``--chunk`` sentences each) every encoder runs
back to back in one process on the same inputs, so a busy machine slows all of them alike; the median of
``--repeats`` totals is reported. The int8 service runs with ``--int8-engine auto``, and where auto picks
something other than PyTorch's default engine that one is measured too (``int8_<engine>``). Metric: Spearman x 100 of the
cosine similarities against the gold scores (``bertkit.retrieval.evaluate_sts``'s definition).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from .inputs import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
STS_DEV = SHARED_DATA / "glue" / "STS-B" / "dev.tsv"


def _size(module: torch.nn.Module) -> int:
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.tell()


def _onnx_encoder(path: Path, svc, threads: int):
    """Mean-pooled, normalised vectors of a list of sentences from an exported encoder graph (batches of 64 by
    length, as the service batches them)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def run(sentences: list[str]) -> np.ndarray:
        ids = svc.encoder.tokenize(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
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


def paired_times(encoders: dict, chunks: list[list[str]], repeats: int) -> tuple[dict, dict]:
    """Every encoder on every chunk, interleaved: for each chunk all encoders run back to back (their order
    rotating from chunk to chunk), so load from other processes falls on all of them alike.

    Returns (seconds per encoder per repeat, vectors per encoder from the last repeat in chunk order)."""
    names = list(encoders)
    seconds = {k: [0.0] * repeats for k in names}
    vectors: dict[str, list] = {k: [] for k in names}
    for r in range(repeats):
        for k in names:
            vectors[k] = []
        for c, chunk in enumerate(chunks):
            turn = (r * len(chunks) + c) % len(names)
            for name in names[turn:] + names[:turn]:
                t0 = time.perf_counter()
                v = encoders[name](chunk)
                seconds[name][r] += time.perf_counter() - t0
                vectors[name].append(v)
    return seconds, {k: np.concatenate(v) for k, v in vectors.items()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--chunk", type=int, default=64, help="sentences per timed call (one service request)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from bertkit.retrieval import read_sts, spearman
    from bertkit.serving.limits import Limits
    from bertkit.serving.quantize import choose_engine
    from bertkit.serving.service import InferenceService

    from .bench_serve import machine
    from .inputs import STAND_IN, minilm_dir, minilm_weights

    rows = read_sts(STS_DEV)
    sentences = sorted({s for r in rows for s in r[:2]})
    limits = Limits(max_batch_size=len(sentences), max_request_tokens=1 << 40)
    services = {
        "float": InferenceService(minilm_dir(), limits=limits),
        "int8": InferenceService(minilm_dir(), limits=limits, int8=True),  # --int8-engine auto
    }
    default_engine = choose_engine("auto", flags=set())  # PyTorch's default: what auto picks without AMX
    if services["int8"].int8_engine != default_engine:
        services["int8_" + default_engine] = InferenceService(
            minilm_dir(), limits=limits, int8=True, int8_engine=default_engine
        )
    out: dict = {"model": "all-MiniLM-L6-v2", "sentences": len(sentences), "pairs": len(rows)}
    out["minilm_weights"] = minilm_weights()
    if out["minilm_weights"] == STAND_IN:  # random weights: the Spearmans below say nothing of the model
        out["quality_comparable"] = False
        out["quality_note"] = "STS-B Spearman measured on stand-in (random) weights: not comparable"
    encoders = {
        name: (lambda xs, svc=svc: svc.embed(xs, normalize=True)[0]) for name, svc in services.items()
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
            encoders[name] = _onnx_encoder(path, services["float"], args.threads)
    except ImportError as e:
        out["onnx"] = f"skipped: {e}"
    chunks = [sentences[i : i + args.chunk] for i in range(0, len(sentences), args.chunk)]
    load_before = os.getloadavg()
    commit = subprocess.run(  # the code that runs: read before the (long) measurement, not after it
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    times, vectors = paired_times(encoders, chunks, args.repeats)
    index = {s: i for i, s in enumerate(sentences)}
    gold = np.array([r[2] for r in rows])
    for name in encoders:
        v = vectors[name]
        cos = np.array([float(v[index[a]] @ v[index[b]]) for a, b, _ in rows])
        if name in services:
            svc = services[name]
            size = _size(svc._int8_encoder if svc.int8 else svc.encoder.model)
        else:
            size = onnx_sizes[name]
        out[name] = {
            "bytes": size,
            "seconds": sorted(times[name])[len(times[name]) // 2],  # the median repeat
            "seconds_per_repeat": times[name],
            "sentences_per_s": len(sentences) / sorted(times[name])[len(times[name]) // 2],
            "sts_b_dev_spearman": 100 * spearman(cos, gold),
        }
        if name in services and services[name].int8:
            out[name]["engine"] = services[name].int8_engine
            out[name]["speedup"] = out["float"]["seconds"] / out[name]["seconds"]
            out[name]["min_cosine_to_float"] = float(np.min(np.sum(v * vectors["float"], axis=1)))
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
    out["timing"] = (
        f"paired: the {len(chunks)} chunks of {args.chunk} sentences each go through every encoder back to back "
        f"(order rotating), {args.repeats} repeats, the median repeat's total reported"
    )
    out["environment"] = machine()
    out["environment"]["load_average_before"] = load_before
    out["threads"] = args.threads
    out["commit"] = commit
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
