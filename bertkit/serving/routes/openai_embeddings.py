"""POST /v1/embeddings (OpenAI's): unit vectors of texts or of token-id sequences, float or base64."""

import base64
from typing import Any

import numpy as np

from ..errors import ApiError, validation
from ..limits import check_budget, check_count, check_text
from ..service import InferenceService


def embed_ids(
    svc: InferenceService,
    ids: list[list[int]],
    normalize: bool | None = None,
    dimensions: int | None = None,
    field: str = "input",
    truncate: bool = False,
) -> tuple[np.ndarray, int]:
    """``InferenceService.embed`` of sequences already tokenised (OpenAI's token-id input): each runs as
    given, special tokens included; ids outside the vocabulary are refused, and sequences over
    ``max_seq_length`` too unless ``truncate`` (then their first ``max_seq_length`` ids run, as TEI cuts them).
    float32 [N, D] vectors and the number of tokens run."""
    if not ids:
        raise validation(f"{field} must hold at least one sequence", field)
    if truncate:
        ids = [seq[: svc.max_seq_length] for seq in ids]
    check_count(len(ids), field, "sequences", svc.limits)
    vocab = svc.config.vocab_size
    for i, seq in enumerate(ids):
        name = f"{field}[{i}]" if len(ids) > 1 else field
        if not seq:
            raise validation(f"{name} holds no token ids", field)
        if len(seq) > svc.max_seq_length:
            raise ApiError(  # TEI's status and type for an over-long input
                413,
                "validation",
                f"{name} is {len(seq)} tokens long; this model takes at most {svc.max_seq_length} "
                "(GET /info: max_input_length); start the server with --auto-truncate to cut it",
                field,
            )
        bad = next((t for t in seq if isinstance(t, bool) or not 0 <= t < vocab), None)
        if bad is not None:
            raise validation(f"{name} holds token id {bad}; this model's ids are 0..{vocab - 1}", field)
    check_budget(sum(len(x) for x in ids), svc.limits)
    svc.check_dimensions(dimensions)
    return svc.vectors(ids, list(range(len(ids))), len(ids), normalize, dimensions)


def handler(svc: InferenceService) -> Any:
    from ._http import Request, as_list, json_response

    class OpenAIEmbeddingsRequest(Request):
        # texts, or token ids (one sequence or several: what LangChain sends)
        input: str | list[str] | list[int] | list[list[int]]
        model: str | None = None
        encoding_format: str = "float"
        dimensions: int | None = None
        user: str | None = None

    def openai_embeddings(req: OpenAIEmbeddingsRequest) -> Any:
        if req.encoding_format not in ("float", "base64"):
            raise validation(
                f"encoding_format must be float or base64, got {req.encoding_format!r}", "encoding_format"
            )
        if req.model is not None:  # echoed in the answer: it must be valid Unicode
            check_text(req.model, "model", svc.limits)
        inp = req.input
        if isinstance(inp, list) and inp and not all(isinstance(x, str) for x in inp):
            ids = [inp] if isinstance(inp[0], int) else inp
            vecs, tokens = embed_ids(
                svc, ids, normalize=True, dimensions=req.dimensions, field="input", truncate=svc.auto_truncate
            )
        else:
            texts = as_list(inp)
            # OpenAI's request has no truncate field: the server's --auto-truncate decides
            vecs, tokens = svc.embed(
                texts, normalize=True, dimensions=req.dimensions, field="input", truncate=svc.auto_truncate
            )
        data = []
        for i, v in enumerate(vecs):
            emb: Any = v.tolist()
            if req.encoding_format == "base64":
                emb = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
            data.append({"object": "embedding", "embedding": emb, "index": i})
        return json_response(
            {
                "object": "list",
                "data": data,
                "model": req.model or svc.model_id,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    return openai_embeddings
