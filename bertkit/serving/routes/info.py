"""GET /info: the model and its limits (``InferenceService.info``) and the routes it serves (the table)."""

from typing import Any

from ..service import InferenceService
from . import served


def handler(svc: InferenceService) -> Any:
    def info() -> dict[str, Any]:
        return {**svc.info(), "endpoints": served(svc)}

    return info
