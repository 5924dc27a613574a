"""Evaluating sentence embeddings on real data: STS correlation and pair retrieval.

``python -m bertkit.retrieval MODEL_DIR --sts glue/STS-B/dev.tsv`` prints JSON with the Spearman
correlation of cosine similarities against the gold scores, and top-1/recall@k of retrieving each
sentence's high-scoring partner among all second sentences.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..sentence.data import read_sts
from ..tasks.metrics import pearson, spearman


def evaluate_sts(encoder: Any, rows: list[tuple[str, str, float]], batch_size: int = 64) -> dict[str, float]:
    """Cosine similarity of each pair's embeddings vs the gold score: Spearman and Pearson (x100)."""
    sentences = sorted({s for r in rows for s in r[:2]})
    where = {s: i for i, s in enumerate(sentences)}
    emb = encoder.encode(sentences, batch_size=batch_size, normalize=True)
    a = emb[[where[r[0]] for r in rows]]
    b = emb[[where[r[1]] for r in rows]]
    cos = (a * b).sum(axis=1, dtype=np.float64).tolist()
    gold = [float(r[2]) for r in rows]
    return {"spearman": 100 * spearman(cos, gold), "pearson": 100 * pearson(cos, gold), "pairs": len(rows)}


def evaluate_pair_retrieval(
    encoder: Any, rows: list[tuple[str, str, float]], min_score: float = 4.0, ks: tuple[int, ...] = (1, 5)
) -> dict[str, float]:
    """For every pair with gold score >= ``min_score``: search its sentence1 among all distinct
    sentence2s (exact cosine index); report how often the partner is ranked top-k, and the MRR."""
    from ..index import exact_search

    queries = [(s1, s2) for s1, s2, score in rows if score >= min_score]
    corpus = sorted({r[1] for r in rows})
    where = {s: i for i, s in enumerate(corpus)}
    docs = encoder.encode(corpus, normalize=True)
    q = encoder.encode([s1 for s1, _ in queries], normalize=True)
    hits = exact_search(docs, q, min(max(max(ks), 100), len(corpus)))[1].tolist()
    # the partner's rank among the hits (inf: not found)
    ranks = [
        found.index(where[s2]) + 1 if where[s2] in found else math.inf
        for (_, s2), found in zip(queries, hits)
    ]
    result: dict[str, float] = {"queries": len(queries), "corpus": len(corpus)}
    for k in ks:
        result[f"recall@{k}"] = float(np.mean([r <= k for r in ranks]))
    result["mrr@100"] = float(np.mean([1.0 / r for r in ranks]))
    return result


def main(argv: list[str] | None = None) -> int:
    from ..sentence.encoder import SentenceEncoder

    p = argparse.ArgumentParser(prog="python -m bertkit.retrieval", description=__doc__)
    p.add_argument("model_dir", type=Path)
    p.add_argument("--sts", type=Path, required=True, help="STS-B style TSV (e.g. glue/STS-B/dev.tsv)")
    p.add_argument("--pooling", default=None)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)
    try:
        t0 = time.perf_counter()
        encoder = SentenceEncoder.from_pretrained(args.model_dir, pooling=args.pooling)
        rows = read_sts(args.sts)
        out = {"model_dir": str(args.model_dir), "data": str(args.sts), "pooling": encoder.pooling}
        out["sts"] = evaluate_sts(encoder, rows, args.batch_size)
        out["retrieval"] = evaluate_pair_retrieval(encoder, rows)
        out["seconds"] = round(time.perf_counter() - t0, 2)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
