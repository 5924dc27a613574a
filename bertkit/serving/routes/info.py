"""GET /info: the model, its limits and the routes it serves (``InferenceService.info``)."""

from typing import Any

from ..service import InferenceService


def handler(svc: InferenceService) -> Any:
    def info() -> dict[str, Any]:
        return svc.info()

    return info
