"""POST /tokenize: one text (and an optional pair) in bertkit's shape, or TEI's per-token rows."""

from typing import Any

from ..errors import validation
from ..limits import check_text, check_texts
from ..service import InferenceService


def tokenize(svc: InferenceService, text: str, pair: str | None = None) -> dict[str, Any]:
    """bertkit's shape: the encoding's tokens, ids, type ids and character offsets."""
    check_text(text, "text", svc.limits)
    if pair is not None:
        check_text(pair, "pair", svc.limits)
    with svc.tok_lock:
        enc = svc.tokenizer.encode(text, pair)
    return {
        "tokens": enc.tokens,
        "ids": enc.ids,
        "type_ids": enc.type_ids,
        "offsets": [list(o) for o in enc.offsets],
    }


def tei_tokens(
    svc: InferenceService, texts: list[str], add_special_tokens: bool = True, prompt_name: str | None = None
) -> list[list[dict[str, Any]]]:
    """TEI's shape: per text, ``{id, text, special, start, stop}`` per token; ``start``/``stop`` are
    character offsets into the text (null for special tokens)."""
    check_texts(texts, "inputs", svc.limits)
    texts = svc.encoder.prompts.apply(texts, prompt_name)
    specials = set(svc.tokenizer.all_special_ids)
    out = []
    with svc.tok_lock:
        encs = [svc.tokenizer.encode(t, add_special_tokens=add_special_tokens) for t in texts]
    for t, enc in zip(texts, encs):
        row = []
        for tid, tok, (a, b) in zip(enc.ids, enc.tokens, enc.offsets):
            special = tid in specials
            row.append(
                {
                    "id": tid,
                    "text": tok if special else t[a:b],
                    "special": special,
                    "start": None if special else a,
                    "stop": None if special else b,
                }
            )
        out.append(row)
    return out


def handler(svc: InferenceService) -> Any:
    from pydantic import Field

    from ._http import Request, as_list

    class TokenizeRequest(Request):
        text: str | None = Field(None, description="bertkit's shape: one text (and an optional pair)")
        pair: str | None = None
        inputs: str | list[str] | None = Field(None, description="TEI's shape: one text or a list")
        add_special_tokens: bool = True
        prompt_name: str | None = None

    def tokenize_route(req: TokenizeRequest) -> Any:
        if (req.text is None) == (req.inputs is None):
            raise validation("give either text (bertkit) or inputs (TEI), not both or neither")
        if req.inputs is None:
            return tokenize(svc, req.text, req.pair)
        if req.pair is not None:
            raise validation("pair goes with text (bertkit's shape); TEI's inputs are single texts")
        return tei_tokens(svc, as_list(req.inputs), req.add_special_tokens, req.prompt_name)

    return tokenize_route
