"""One error path for the server: every refusal is an ``ApiError`` and leaves as ``{"error", "error_type"}``.

The shape is text-embeddings-inference's (TEI); on the OpenAI routes (``/v1/...``) it is OpenAI's,
``{"error": {"message", "type", "param", "code"}}``, which its clients read the message from, and a request
refused as invalid is 400 there (OpenAI's status; TEI's is 422), so a client raises its ``BadRequestError``. Handlers are installed once on the app, so a route never
needs its own try/except: bad input raises ``ApiError`` (or a pydantic validation error, or a ``UserError``
from the library), and anything else is a bug, answered 500 with its traceback in the server log only.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from ..errors import UserError

log = logging.getLogger("bertkit.serving")


class ApiError(Exception):
    """A request the server refuses: HTTP ``status``, a TEI-style ``error_type`` and a one-line message.

    ``param``: the request field at fault (``"input"``, ``texts[3]``), when one is; OpenAI's error body
    reports its top-level name so a client can point at it."""

    def __init__(self, status: int, error_type: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.param = param


def validation(message: str, param: str | None = None) -> ApiError:
    return ApiError(422, "validation", message, param)


def too_large(message: str, param: str | None = None) -> ApiError:
    return ApiError(413, "payload_too_large", message, param)


def top_field(field: str | None) -> str | None:
    """``input[2]`` / ``inputs.sentences`` -> ``input`` / ``inputs``: the request's own field name."""
    if not field:
        return None
    return re.split(r"[\[.]", field, maxsplit=1)[0] or None


def _field(loc: tuple[Any, ...]) -> str:
    """pydantic's ``("body", "texts", 3)`` -> ``texts[3]``."""
    out = ""
    for part in loc:
        if part in ("body", "query", "path") and not out:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_message(errors: list[dict[str, Any]]) -> str:
    """The first of pydantic's errors as one line naming the field (the input itself is never echoed)."""
    if not errors:
        return "invalid request"
    err = errors[0]
    if err.get("type") == "json_invalid":
        ctx = err.get("ctx") or {}
        return one_line(f"the body is not valid JSON: {ctx.get('error', 'parse error')}")
    field = _field(tuple(err.get("loc") or ()))
    if err.get("type") == "extra_forbidden":
        return one_line(
            f"unknown field {field!r}: this route does not take it (docs/serving.md lists each route's fields)"
        )
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return one_line(f"{field}: {err.get('msg', 'invalid value')}{more}")


OPENAI_PREFIX = "/v1/"


def error_body(
    status: int, error_type: str, message: str, path: str = "", param: str | None = None
) -> dict[str, Any]:
    """TEI's error shape, or OpenAI's for a ``/v1/`` ``path`` (``code`` carries TEI's error type,
    ``param`` the top-level name of the field at fault, or null when no one field is)."""
    if path.startswith(OPENAI_PREFIX):
        kind = "invalid_request_error" if status < 500 else "server_error"
        return {"error": {"message": message, "type": kind, "param": top_field(param), "code": error_type}}
    return {"error": message, "error_type": error_type}


async def send_error(
    send: Any, status: int, error_type: str, message: str, path: str, on_error: Any, *headers: tuple
) -> None:
    """Answer an ASGI request with the error body, from a middleware that refuses it before the app runs;
    ``headers``: (name, value) pairs beyond the content type and length."""
    if on_error is not None:
        on_error(status, error_type)
    body = json.dumps(error_body(status, error_type, message, path)).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def install_handlers(app: Any, on_error: Any = None) -> None:
    """Register the handlers; ``on_error(status, error_type)`` is called for each (metrics)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def respond(
        status: int, error_type: str, message: str, request: Any = None, param: str | None = None
    ) -> JSONResponse:
        path = request.url.path if request is not None else ""
        if status == 422 and path.startswith(OPENAI_PREFIX):  # OpenAI answers a bad request 400, not 422
            status = 400
        if on_error is not None:
            on_error(status, error_type)
        return JSONResponse(error_body(status, error_type, message, path, param), status_code=status)

    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return respond(exc.status, exc.error_type, one_line(exc.message), request, exc.param)

    @app.exception_handler(UserError)
    async def _user_error(request, exc: UserError):
        return respond(422, "validation", one_line(str(exc)), request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc: RequestValidationError):
        errors = list(exc.errors())
        param = _field(tuple(errors[0].get("loc") or ())) if errors else None
        param = None if param == "body" else param  # the body as a whole (not JSON, not an object)
        return respond(422, "validation", validation_message(errors), request, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.url.path}; GET /info lists this server's routes"
        elif exc.status_code == 400 and "parsing the body" in detail:  # e.g. JSON nested too deep
            detail = "the body could not be parsed as JSON (malformed or nested too deeply)"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return respond(exc.status_code, kind, one_line(detail), request)

    @app.exception_handler(Exception)
    async def _bug(request, exc: Exception):  # a bug, not bad input: keep the traceback in the log
        log.exception("internal error on %s %s", request.method, request.url.path)
        return respond(500, "internal", "internal server error (see the server log)", request)


__all__ = ["ApiError", "error_body", "install_handlers", "one_line", "too_large", "top_field", "validation"]
