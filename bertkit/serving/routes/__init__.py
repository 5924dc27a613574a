"""The server's routes, one module each, and the one table that mounts them.

A route module holds its request model and handler (``handler(svc)``, which returns the FastAPI endpoint;
the model is defined inside it so that this package imports without the serve extra) and the model call
the handler makes. ``ROUTES`` lists every route in the order ``/info`` reports them; a route with ``heads``
answers 404 (``require``) on a model whose architecture is not one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..errors import ApiError

if TYPE_CHECKING:
    from ..service import InferenceService


@dataclass(frozen=True)
class Route:
    """``path`` answered for ``method`` by ``handler`` of the module ``module`` (of this package);
    ``heads``: the architectures it applies to (empty: every model), ``head``: what the 404 calls the
    head the others lack."""

    path: str
    method: str
    module: str
    heads: tuple[str, ...] = ()
    head: str = ""


def _both(head: str) -> tuple[str, ...]:
    """BERT's and ModernBERT's class names of the task head ``head`` ("ForMaskedLM", ...)."""
    return ("Bert" + head, "ModernBert" + head)


ROUTES = [
    Route("/", "GET", "playground"),
    Route("/health", "GET", "health"),
    Route("/info", "GET", "info"),
    Route("/metrics", "GET", "prometheus"),
    Route("/tokenize", "POST", "tokenize"),
    Route("/decode", "POST", "decode"),
    Route("/embed", "POST", "embed"),
    Route("/embed_all", "POST", "embed_all"),
    Route("/similarity", "POST", "similarity"),
    Route("/v1/embeddings", "POST", "openai_embeddings"),
    Route("/rerank", "POST", "rerank"),
    Route("/predict", "POST", "predict", _both("ForSequenceClassification"), "sequence-classification"),
    Route("/fill-mask", "POST", "fill_mask", (*_both("ForMaskedLM"), "BertForPreTraining"), "masked-LM"),
    Route("/qa", "POST", "qa", _both("ForQuestionAnswering"), "question-answering"),
    Route("/ner", "POST", "ner", _both("ForTokenClassification"), "token-classification"),
]


def served(svc: InferenceService) -> list[str]:
    """The paths that answer for this model (every route is mounted; the others answer 404)."""
    return [r.path for r in ROUTES if not r.heads or svc.architecture in r.heads]


def require(svc: InferenceService, path: str) -> None:
    """404 naming the missing head when ``path`` does not apply to this model's architecture."""
    route = next(r for r in ROUTES if r.path == path)
    if route.path not in served(svc):
        raise ApiError(
            404,
            "unsupported",
            f"this model ({svc.architecture}) has no {route.head} head, so {path} is unavailable; "
            f"it serves {' '.join(served(svc))}",
        )


def register(app: Any, svc: InferenceService) -> None:
    """Mount every route of ``ROUTES`` on the FastAPI ``app``."""
    for r in ROUTES:
        endpoint = import_module(f"{__name__}.{r.module}").handler(svc)
        # an endpoint may name its response class (HTML, say); JSON otherwise
        options = {"response_class": endpoint.response_class} if hasattr(endpoint, "response_class") else {}
        app.add_api_route(r.path, endpoint, methods=[r.method], name=r.module, **options)


__all__ = ["ROUTES", "Route", "register", "require", "served"]
