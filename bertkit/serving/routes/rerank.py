"""POST /rerank (TEI's): texts ranked against a query, best first."""

from typing import Any

import numpy as np

from ..limits import check_text, check_texts
from ..service import InferenceService


def rerank(
    svc: InferenceService, query: str, texts: list[str], raw_scores: bool = False, truncate: bool = True
) -> list[float]:
    """One score per text (input order): a cross-encoder's logit (sigmoid unless ``raw_scores``), or
    the cosine similarity of the embeddings. ``truncate=False`` refuses an input over ``max_seq_length``."""
    check_text(query, "query", svc.limits)
    check_texts(texts, "texts", svc.limits)
    names = [f"texts[{i}]" for i in range(len(texts))]
    if svc.cross_encoder:
        queries = [query] * len(texts)
        logits = svc.classify_logits(queries, list(texts), field=names, truncate=truncate)[:, 0]
        scores = logits if raw_scores else 1.0 / (1.0 + np.exp(-logits))
        return [float(s) for s in scores]
    # the query is not one of the --max-batch-size texts: checked above on its own
    return svc.cosines([query, *texts], truncate=truncate, field=["query", *names])


def handler(svc: InferenceService) -> Any:
    from ._http import Request

    class RerankRequest(Request):
        query: str
        texts: list[str]
        return_text: bool = False
        raw_scores: bool = False
        truncate: bool | None = None

    def rerank_route(req: RerankRequest) -> list[dict[str, Any]]:
        truncate = svc.resolve_truncate(req.truncate)  # omitted: the server's --auto-truncate
        scores = rerank(svc, req.query, req.texts, raw_scores=req.raw_scores, truncate=truncate)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        out = []
        for i in order:
            row: dict[str, Any] = {"index": i, "score": scores[i]}
            if req.return_text:
                row["text"] = req.texts[i]
            out.append(row)
        return out

    return rerank_route
