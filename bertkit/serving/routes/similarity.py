"""POST /similarity (TEI's): cosine similarity of a source sentence with each of several sentences."""

from typing import Any

from ..limits import check_text, check_texts
from ..service import InferenceService


def similarity(
    svc: InferenceService, source: str, sentences: list[str], prompt_name: str | None = None
) -> list[float]:
    """One cosine per sentence (input order), of unit vectors from the service's embedding call."""
    check_text(source, "inputs.source_sentence", svc.limits)
    check_texts(sentences, "inputs.sentences", svc.limits)
    texts = svc.encoder.prompts.apply([source, *sentences], prompt_name)
    return svc.cosines(texts)


def handler(svc: InferenceService) -> Any:
    from ._http import Request, json_response

    class SimilarityInput(Request):
        source_sentence: str
        sentences: list[str]

    class SimilarityParameters(Request):
        prompt_name: str | None = None

    class SimilarityRequest(Request):
        inputs: SimilarityInput
        parameters: SimilarityParameters | None = None

    def similarity_route(req: SimilarityRequest) -> Any:
        prompt = req.parameters.prompt_name if req.parameters is not None else None
        return json_response(similarity(svc, req.inputs.source_sentence, req.inputs.sentences, prompt))

    return similarity_route
