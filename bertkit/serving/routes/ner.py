"""POST /ner: entities with character offsets into a text, or word tags of a pre-split sentence."""

from functools import partial
from typing import Any

from ..errors import validation
from ..limits import check_budget, check_text, windowed_tokens
from ..service import InferenceService
from . import require


def ner(
    svc: InferenceService, text: str | None = None, words: list[str] | None = None, aggregation: str = "first"
) -> dict[str, Any]:
    """Entities with character offsets into ``text`` (or into ``" ".join(words)``, with the words' tags)."""
    from ...pipelines.ner import AGGREGATIONS, entities, split_words

    require(svc, "/ner")
    if (text is None) == (words is None):
        raise validation("give either text or words (a pre-split sentence), not both or neither")
    if aggregation not in AGGREGATIONS:
        raise validation(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    if words is not None:
        if not words:
            raise validation("words must hold at least one word")
        for i, w in enumerate(words):
            check_text(w, f"words[{i}]", svc.limits)
            if not w or any(c.isspace() for c in w):
                raise validation(f"words[{i}] must be a non-empty word without whitespace")
        text = " ".join(words)
        check_text(text, "words (joined)", svc.limits)
        spans, pos = [], 0
        for w in words:
            spans.append((pos, pos + len(w)))
            pos += len(w) + 1
    else:
        check_text(text, "text", svc.limits)
    # every word costs at least one token; windows hold whole words
    check_budget(windowed_tokens(len(text), 2, svc.max_seq_length, svc.max_seq_length - 2), svc.limits)
    with svc.tok_lock:
        if words is None:
            spans = split_words(svc.tokenizer, text)
    ents, tagged = entities(
        svc.model,
        svc.tokenizer,
        text,
        spans,
        partial(svc.batcher.submit, "tokens"),
        svc.labels(),
        svc.max_seq_length,
        aggregation,
        svc.tok_lock,
    )
    out: dict[str, Any] = {"entities": ents}
    if words is not None:
        out["tags"] = tagged["tags"]
    return out


def handler(svc: InferenceService) -> Any:
    from ._http import Request

    class NERRequest(Request):
        text: str | None = None
        words: list[str] | None = None
        aggregation: str = "first"

    def ner_route(req: NERRequest) -> dict[str, Any]:
        return ner(svc, req.text, req.words, req.aggregation)

    return ner_route
