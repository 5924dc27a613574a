"""POST /rerank (TEI's): texts ranked against a query, best first."""

from typing import Any

import numpy as np

from ..limits import check_text, check_texts
from ..service import InferenceService


def rerank(svc: InferenceService, query: str, texts: list[str], raw_scores: bool = False) -> list[float]:
    """One score per text (input order): a cross-encoder's logit (sigmoid unless ``raw_scores``), or
    the cosine similarity of the embeddings."""
    check_text(query, "query", svc.limits)
    check_texts(texts, "texts", svc.limits)
    if svc.cross_encoder:
        logits = svc.classify_logits([query] * len(texts), list(texts))[:, 0]
        scores = logits if raw_scores else 1.0 / (1.0 + np.exp(-logits))
        return [float(s) for s in scores]
    # the query is not one of the --max-batch-size texts: checked above on its own
    return svc.cosines([query, *texts])


def handler(svc: InferenceService) -> Any:
    from ._http import Request

    class RerankRequest(Request):
        query: str
        texts: list[str]
        return_text: bool = False
        raw_scores: bool = False
        truncate: bool | None = None

    def rerank_route(req: RerankRequest) -> list[dict[str, Any]]:
        scores = rerank(svc, req.query, req.texts, raw_scores=req.raw_scores)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        out = []
        for i in order:
            row: dict[str, Any] = {"index": i, "score": scores[i]}
            if req.return_text:
                row["text"] = req.texts[i]
            out.append(row)
        return out

    return rerank_route
