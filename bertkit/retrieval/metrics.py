"""Ranking metrics of retrieval: each query has a ranked list of document ids and a set of relevant ids.

recall@k: the share of the relevant ids found in the first k (with one relevant id, whether it is there);
MRR@10: 1/rank of the first relevant id within the first 10 (0 if none); nDCG@10 with binary relevance:
sum over relevant hits of 1/log2(rank+1), divided by the same sum for an ideal ranking.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

KS = (1, 5, 10)


def query_metrics(ranked: Sequence[Hashable], relevant: set) -> dict[str, float]:
    """Metrics of one query's ranked ids against its relevant ids (values in [0, 1])."""
    if not relevant:
        raise ValueError("a query needs at least one relevant document")
    out = {f"recall@{k}": len(relevant & set(ranked[:k])) / len(relevant) for k in KS}
    out["mrr@10"] = next((1.0 / r for r, d in enumerate(ranked[:10], start=1) if d in relevant), 0.0)
    dcg = sum(1.0 / math.log2(r + 1) for r, d in enumerate(ranked[:10], start=1) if d in relevant)
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(len(relevant), 10) + 1))
    out["ndcg@10"] = dcg / ideal
    return out


def retrieval_metrics(rankings: Sequence[Sequence[Hashable]], relevant: Sequence[set]) -> dict[str, float]:
    """Mean of :func:`query_metrics` over queries, in percent, plus the number of queries."""
    if len(rankings) != len(relevant):
        raise ValueError(f"{len(rankings)} rankings but {len(relevant)} relevance sets")
    per = [query_metrics(r, rel) for r, rel in zip(rankings, relevant)]
    names = [f"recall@{k}" for k in KS] + ["mrr@10", "ndcg@10"]
    out: dict[str, float] = {n: 100.0 * float(np.mean([p[n] for p in per])) if per else 0.0 for n in names}
    out["queries"] = len(per)
    return out
