"""POST /embed: sentence vectors, in bertkit's shape (``texts``) or TEI's (``inputs``).

The model call is the service's own (``InferenceService.embed``): /v1/embeddings, /rerank and
/similarity share it."""

import time
from typing import Any

from ..errors import validation
from ..service import InferenceService


def handler(svc: InferenceService) -> Any:
    from pydantic import Field

    from ._http import Request, as_list, json_response

    class EmbedRequest(Request):
        texts: list[str] | None = Field(None, description="texts to encode (bertkit's shape)")
        inputs: str | list[str] | None = Field(None, description="TEI's shape: one text or a list")
        normalize: bool | None = None
        truncate: bool | None = None
        truncation_direction: str = "Right"
        prompt_name: str | None = None
        dimensions: int | None = None
        long_text: str | None = None

    def embed(req: EmbedRequest) -> Any:
        if (req.texts is None) == (req.inputs is None):
            raise validation("give either texts (bertkit) or inputs (TEI), not both or neither")
        tei = req.inputs is not None
        texts = as_list(req.inputs) if tei else req.texts
        # TEI normalises by default; bertkit's shape keeps the model's own setting (None)
        normalize = req.normalize if req.normalize is not None else (True if tei else None)
        t0 = time.perf_counter()
        vecs, _ = svc.embed(
            texts,
            normalize=normalize,
            dimensions=req.dimensions,
            # TEI's shape: an omitted truncate is the server's --auto-truncate; bertkit's cuts (--long-text)
            truncate=svc.resolve_truncate(req.truncate) if tei else req.truncate is not False,
            long_text=req.long_text,
            field="inputs" if tei else "texts",
            truncation_direction=req.truncation_direction,
            prompt_name=req.prompt_name,
        )
        if tei:
            return json_response(vecs.tolist())
        return json_response(
            {
                "embeddings": vecs.tolist(),
                "dim": int(vecs.shape[1]),
                "count": len(vecs),
                "seconds": round(time.perf_counter() - t0, 4),
            }
        )

    return embed
