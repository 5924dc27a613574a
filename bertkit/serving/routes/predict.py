"""POST /predict: a sequence classifier's labels, in bertkit's shape (``texts``, ``pairs``) or TEI's
(``inputs``: a text, a [text, pair], or a list of those)."""

from typing import Any

import numpy as np
import torch

from ..errors import validation
from ..service import InferenceService
from . import require


def predict(
    svc: InferenceService,
    texts: list[str],
    pairs: list[str] | None = None,
    long_text: str | None = None,
    field: str = "texts",
) -> list[dict[str, Any]]:
    """bertkit's shape: per text the best label, its probability and all of them (a regression head or
    one output: the score alone)."""
    require(svc, "/predict")
    logits = svc.classify_logits(texts, pairs, long_text, field)
    labels = svc.labels()
    results = []
    for row in logits:
        if len(row) == 1 or svc.config.problem_type == "regression":
            results.append({"score": float(row[0])})
            continue
        probs = torch.from_numpy(row).softmax(-1).tolist()
        best = int(np.argmax(probs))
        results.append(
            {"label": labels[best], "score": probs[best], "probabilities": dict(zip(labels, probs))}
        )
    return results


def tei_predict(
    svc: InferenceService,
    items: list[Any],
    raw_scores: bool,
    long_text: str | None,
    truncate: bool = True,
) -> list[Any]:
    """TEI's shape: per item (a text or [text, pair]), every label with its score, best first;
    ``truncate=False`` refuses an item over ``max_seq_length`` tokens (413 naming it)."""
    texts, pairs = [], []
    for k, item in enumerate(items):
        item = [item] if isinstance(item, str) else item
        if len(item) not in (1, 2):
            raise validation(f"inputs[{k}] must be a text or a [text, pair] list, got {len(item)} items")
        texts.append(item[0])
        pairs.append(item[1] if len(item) == 2 else None)
    if any(p is not None for p in pairs) and any(p is None for p in pairs):
        raise validation("inputs mixes single texts and pairs; send one kind per request")
    require(svc, "/predict")
    logits = svc.classify_logits(
        texts,
        None if pairs[0] is None else pairs,
        long_text=long_text,
        field="inputs",
        truncate=truncate,
    )
    labels = svc.labels()
    # a regression head's outputs are the scores themselves (a softmax over one logit is always 1.0)
    raw = raw_scores or svc.config.problem_type == "regression" or logits.shape[1] == 1
    answers = []
    for row in logits:
        scores = row if raw else np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        ranked = sorted(range(len(row)), key=lambda j: -scores[j])
        answers.append([{"score": float(scores[j]), "label": labels[j]} for j in ranked])
    return answers


def handler(svc: InferenceService) -> Any:
    from ._http import Request, json_response

    class PredictRequest(Request):
        texts: list[str] | None = None
        pairs: list[str] | None = None
        inputs: str | list[str | list[str]] | None = None
        raw_scores: bool = False
        long_text: str | None = None
        truncate: bool | None = None  # TEI's inputs only: omitted -> --auto-truncate

    def predict_route(req: PredictRequest) -> Any:
        if req.inputs is None:
            if req.texts is None:
                raise validation("give texts (and optionally pairs), or TEI's inputs")
            return json_response({"predictions": predict(svc, req.texts, req.pairs, long_text=req.long_text)})
        single = isinstance(req.inputs, str) or (
            len(req.inputs) == 2 and all(isinstance(x, str) for x in req.inputs)
        )  # as TEI: ["a", "b"] is one pair
        items = [req.inputs] if single else list(req.inputs)
        if not items:
            raise validation("inputs must hold at least one text or [text, pair]")
        answers = tei_predict(svc, items, req.raw_scores, req.long_text, svc.resolve_truncate(req.truncate))
        return json_response(answers[0] if single else answers)

    return predict_route
