"""What the route handlers share: the request base model and the JSON answer (needs the serve extra)."""

import json
from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from ..errors import ApiError


class Request(BaseModel):
    # an unknown field is refused (422 naming it), not ignored: a misspelt option would otherwise
    # silently do nothing
    model_config = ConfigDict(extra="forbid")


def json_response(obj: Any) -> Response:
    """A JSON response written by ``json.dumps`` directly: FastAPI's default encoder walks every float of
    an embedding in Python, which costs more than the model at high request rates.

    NaN and infinity are not JSON (``json.dumps`` would write bare ``NaN`` tokens that clients cannot
    parse): a model that produces them answers 500 with a JSON error instead."""
    try:
        body = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise ApiError(
            500,
            "model_output",
            "the model produced NaN or infinity for this request; its weights may be corrupt",
        ) from None
    return Response(body, media_type="application/json")


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
