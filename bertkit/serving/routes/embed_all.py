"""POST /embed_all (TEI's): the last hidden state of every token, [T_i, H] per text (no pooling)."""

from typing import Any

import numpy as np

from ..limits import check_embed_all, check_texts
from ..service import InferenceService


def embed_all(
    svc: InferenceService,
    texts: list[str],
    truncate: bool = True,
    truncation_direction: str = "right",
    prompt_name: str | None = None,
    field: str = "inputs",
) -> list[np.ndarray]:
    """float32 [T_i, H] per text, through the batcher's ``hidden`` task."""
    check_texts(texts, field, svc.limits)
    texts = svc.encoder.prompts.apply(texts, prompt_name)
    ids, _, _ = svc.encode(
        texts,
        long_text="truncate",
        for_embedding=True,
        truncate=truncate,
        truncation_direction=truncation_direction,
        field=field,
    )
    check_embed_all(sum(len(x) for x in ids), svc.config.hidden_size, svc.limits)
    return svc.batcher.submit("hidden", ids)


def handler(svc: InferenceService) -> Any:
    from ._http import Request, as_list, json_response

    class EmbedAllRequest(Request):
        inputs: str | list[str]
        truncate: bool | None = None
        truncation_direction: str = "Right"
        prompt_name: str | None = None

    def embed_all_route(req: EmbedAllRequest) -> Any:
        states = embed_all(
            svc,
            as_list(req.inputs),
            truncate=svc.resolve_truncate(req.truncate),  # omitted: the server's --auto-truncate
            truncation_direction=req.truncation_direction,
            prompt_name=req.prompt_name,
        )
        return json_response([x.tolist() for x in states])

    return embed_all_route
