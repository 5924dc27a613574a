"""Sentence-embedding throughput: bertkit SentenceEncoder vs transformers BertModel + mean pooling.

    .venv/bin/python benchmarks/bench_embed.py [--n 512] [--batch-size 32] [--threads 1]

Both encode the same shuffled STS-B dev sentences (all-MiniLM-L6-v2) side by side in one run; prints
JSON with sentences/s (best of --repeats) and the ratio, plus the max difference of the embeddings.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a file: the benchmarks package lives in the project root
    sys.path.insert(0, str(ROOT))

from benchmarks.inputs import SHARED_DATA, minilm_dir, minilm_weights  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sts", type=Path, default=SHARED_DATA / "glue" / "STS-B" / "dev.tsv")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer, BertModel

    from bertkit.retrieval import read_sts
    from bertkit.sentence.encoder import SentenceEncoder

    path = minilm_dir()
    sents = sorted({s for r in read_sts(args.sts) for s in r[:2]})
    random.Random(0).shuffle(sents)
    sents = sents[: args.n]
    enc = SentenceEncoder.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(str(path))
    hf = BertModel.from_pretrained(str(path)).eval()

    @torch.inference_mode()
    def hf_encode(texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), args.batch_size):
            b = tok(
                texts[i : i + args.batch_size],
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            )
            h = hf(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1).numpy())
        return np.concatenate(out)

    runs = {
        "bertkit": lambda: enc.encode(sents, batch_size=args.batch_size),
        "transformers": lambda: hf_encode(sents),
    }
    for fn in runs.values():  # warm-up
        fn()
    best = {}
    vectors = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            vectors[name] = fn()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    result = {
        "sentences": len(sents),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "minilm_weights": minilm_weights(path),
        "sentences_per_s": {k: round(len(sents) / v, 1) for k, v in best.items()},
        "speedup_vs_transformers": round(best["transformers"] / best["bertkit"], 2),
        "max_abs_diff": float(np.abs(vectors["bertkit"] - vectors["transformers"]).max()),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
