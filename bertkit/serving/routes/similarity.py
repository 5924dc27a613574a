"""POST /similarity (TEI's): cosine similarity of a source sentence with each of several sentences."""

from typing import Any

from ..limits import check_text, check_texts
from ..service import InferenceService


def similarity(
    svc: InferenceService,
    source: str,
    sentences: list[str],
    prompt_name: str | None = None,
    truncate: bool = True,
    truncation_direction: str = "right",
) -> list[float]:
    """One cosine per sentence (input order), of unit vectors from the service's embedding call;
    ``truncate=False`` refuses a sentence over ``max_seq_length`` tokens (413 naming it)."""
    check_text(source, "inputs.source_sentence", svc.limits)
    check_texts(sentences, "inputs.sentences", svc.limits)
    texts = svc.encoder.prompts.apply([source, *sentences], prompt_name)
    names = ["inputs.source_sentence", *(f"inputs.sentences[{i}]" for i in range(len(sentences)))]
    return svc.cosines(texts, truncate=truncate, field=names, truncation_direction=truncation_direction)


def handler(svc: InferenceService) -> Any:
    from ._http import Request, json_response

    class SimilarityInput(Request):
        source_sentence: str
        sentences: list[str]

    class SimilarityParameters(Request):
        prompt_name: str | None = None
        truncate: bool | None = None
        truncation_direction: str = "Right"

    class SimilarityRequest(Request):
        inputs: SimilarityInput
        parameters: SimilarityParameters | None = None

    def similarity_route(req: SimilarityRequest) -> Any:
        params = req.parameters or SimilarityParameters()
        scores = similarity(
            svc,
            req.inputs.source_sentence,
            req.inputs.sentences,
            params.prompt_name,
            truncate=svc.resolve_truncate(params.truncate),  # omitted: the server's --auto-truncate
            truncation_direction=params.truncation_direction,
        )
        return json_response(scores)

    return similarity_route
