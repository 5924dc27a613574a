"""``bertkit serve --access-log``: one JSON object per request on stderr, for log shippers.

Each line holds ``ts`` (UTC, ISO 8601), ``method``, ``path`` (no query string: it may carry secrets),
``status`` (null when the client left before an answer; 500 for a bug), ``ms`` (arrival to the answer's
last byte, which leaves after the line is written, so a client holding its answer finds the line) and
``request_id`` (the ``x-request-id`` the answer carries, so a client's quoted id finds its line). The
middleware is the outermost one, so refusals by the key, body-limit and CORS checks are logged too.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, TextIO


class AccessLog:
    """ASGI middleware writing one line per HTTP request to ``stream`` (default: the current stderr)."""

    def __init__(self, app: Any, stream: TextIO | None = None) -> None:
        self.app = app
        self.stream = stream

    def _write(self, record: dict[str, Any]) -> None:
        stream = self.stream or sys.stderr  # looked up per line: a redirected stderr is honoured
        # ASCII escapes keep the record one line whatever bytes the path holds
        stream.write(json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n")
        stream.flush()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status: int | None = None
        request_id: str | None = None
        written = False

        def log() -> None:
            nonlocal written
            if written:
                return
            written = True
            self._write(
                {
                    "ts": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                    "method": scope.get("method", ""),
                    "path": scope.get("path", ""),
                    "status": status,
                    "ms": round((time.perf_counter() - t0) * 1000, 3),
                    "request_id": request_id,
                }
            )

        async def send_logged(message: dict[str, Any]) -> None:
            nonlocal status, request_id
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == b"x-request-id":
                        request_id = value.decode("latin-1")
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                # before the last byte leaves: a client holding its answer finds its line already written
                log()
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        except Exception:
            # a bug: the server's outermost handler answers 500 after this line is written
            status = 500 if status is None else status
            raise
        finally:
            log()  # no last byte was sent: the client left, or a bug (500)


__all__ = ["AccessLog"]
