"""Retrieval evaluation: a bi-encoder ranks the whole corpus for each query (exact search), optionally a
cross-encoder re-ranks its top ``rerank_top``; recall@1/5/10, MRR@10 and nDCG@10 of each stage."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..sentence.encoder import rank_corpus
from .metrics import retrieval_metrics


def evaluate_retrieval(
    encoder: Any,
    queries: Sequence[str],
    relevant: Sequence[set],
    corpus_ids: Sequence[Any],
    corpus: Sequence[str],
    reranker: Any = None,
    rerank_top: int = 50,
    batch_size: int = 64,
    rerank_queries: int | None = None,
) -> dict[str, Any]:
    """Metrics (percent) of the bi-encoder alone (``bi_encoder``) and re-ranked (``reranked``).

    ``rerank_queries=N`` re-ranks only the first N queries (a cross-encoder scores ``rerank_top`` pairs per
    query, the slow part); ``bi_encoder_reranked_queries`` then gives the bi-encoder's metrics on the same N.
    ``relevant[i]`` holds the JSON keys (``json.dumps(id, sort_keys=True)``) of query i's relevant ids."""
    keys = [json.dumps(i, sort_keys=True) for i in corpus_ids]
    t0 = time.perf_counter()
    _, top = rank_corpus(encoder, queries, corpus, k=max(100, rerank_top), batch_size=batch_size)
    out: dict[str, Any] = {"corpus": len(corpus), "bi_encoder_seconds": round(time.perf_counter() - t0, 2)}
    ranked = [[keys[j] for j in row if j >= 0] for row in top]
    out["bi_encoder"] = retrieval_metrics(ranked, relevant)
    if reranker is not None:
        from tqdm import tqdm

        t0 = time.perf_counter()
        reranked = []
        n = len(queries) if rerank_queries is None else min(rerank_queries, len(queries))
        for q, row in tqdm(list(zip(queries[:n], top[:n])), desc="rerank", unit="query"):
            cand = [j for j in row[:rerank_top] if j >= 0]
            scores = reranker.predict([(q, corpus[j]) for j in cand], batch_size=batch_size)
            order = np.argsort(-scores, kind="stable")
            rest = [keys[j] for j in row[rerank_top:] if j >= 0]  # below the re-ranked head: bi-encoder order
            reranked.append([keys[cand[o]] for o in order] + rest)
        out["reranked"] = retrieval_metrics(reranked, relevant[:n])
        if n < len(queries):
            out["bi_encoder_reranked_queries"] = retrieval_metrics(ranked[:n], relevant[:n])
        out["rerank_top"] = rerank_top
        out["rerank_seconds"] = round(time.perf_counter() - t0, 2)
    return out
