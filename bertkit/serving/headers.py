"""ASGI middleware for what every response carries and every request must show.

- ``RequestMeta``: an ``x-request-id`` (the client's, when it is a short token, else a fresh one) and
  ``x-compute-time`` (milliseconds from the request's arrival to the response's start) on every answer,
  refusals included, so a client can quote the id and a slow answer can be told from a slow network.
- ``ApiKey``: with ``--api-key``, every route but ``/health`` needs ``Authorization: Bearer KEY``;
  compared in constant time. Refused with 401 before the body is read.
"""

from __future__ import annotations

import hmac
import re
import time
import uuid
from typing import Any

from .errors import send_error

CLIENT_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
OPEN_PATHS = ("/health",)  # load balancers' probes carry no key


class RequestMeta:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"")
        rid = given if CLIENT_ID.fullmatch(given) else uuid.uuid4().hex.encode()

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                ms = f"{(time.perf_counter() - t0) * 1000:.3f}".encode()
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", rid), (b"x-compute-time", ms)]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class ApiKey:
    def __init__(self, app: Any, key: str, on_error: Any = None) -> None:
        self.app = app
        self.key = key.encode("utf-8")
        self.on_error = on_error

    def _allowed(self, scope: Any) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        # compare_digest on every request, whatever the scheme: the time taken says nothing of the key
        ok = hmac.compare_digest(token.strip(), self.key)
        return ok and scheme.lower() == b"bearer"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        message = "missing or wrong api key: send the header 'Authorization: Bearer KEY' (--api-key)"
        challenge = (b"www-authenticate", b"Bearer")
        await send_error(send, 401, "unauthorized", message, scope.get("path", ""), self.on_error, challenge)


__all__ = ["ApiKey", "RequestMeta"]
