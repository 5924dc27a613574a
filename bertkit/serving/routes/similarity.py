"""POST /similarity (TEI's): cosine similarity of a source sentence with each of several sentences."""

from typing import Any

from ..limits import check_budget, check_text, check_texts
from ..service import InferenceService


def similarity(
    svc: InferenceService, source: str, sentences: list[str], prompt_name: str | None = None
) -> list[float]:
    """One cosine per sentence (input order), of unit vectors from the service's embedding call."""
    check_text(source, "inputs.source_sentence", svc.limits)
    check_texts(sentences, "inputs.sentences", svc.limits)
    texts = svc.encoder.prompts.apply([source, *sentences], prompt_name)
    check_budget(svc.budget(texts, None, svc.long_text), svc.limits)
    vecs, _ = svc.embed_checked(texts, normalize=True)
    return [float(s) for s in vecs[1:] @ vecs[0]]


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
