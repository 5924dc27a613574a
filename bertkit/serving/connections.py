"""What one client connection may hold: a cap on open connections and a deadline for a request to arrive.

Why: uvicorn accepts every connection and waits for its request forever (its keep-alive timer runs only
between requests, and stops at the first byte of the next one). 300 clients that opened a request and sent
nothing more used up the open-file limit; ``accept`` then failed in a tight loop, logging "Too many open
files" hundreds of thousands of times, and ``/health`` stopped answering. Here:

- ``max_connections``: a connection over the cap is answered 503 (a one-line JSON error) and closed at once,
  so the server never holds more sockets than that (set below the open-file limit);
- ``read_timeout``: seconds from the connection's start (or the end of its previous response) until its
  request, headers and body, must have fully arrived; a slower one is closed. The time the model takes to
  answer is not counted;
- ``keep_alive``: seconds an idle connection stays open between requests (uvicorn's own timer).

Header size stays bounded by h11 (16 KiB of incomplete headers), the body by ``BodyLimit``.
"""

from __future__ import annotations

import json
import resource
from typing import Any

from .errors import error_body

DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_READ_TIMEOUT = 30.0
DEFAULT_KEEP_ALIVE = 5.0
SPARE_FILES = 64  # files the server needs besides its client sockets (model, logs, the listening socket)


def connection_cap(requested: int | None) -> int:
    """``requested``, or the default; never more than the process's open-file limit leaves for sockets."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = DEFAULT_MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else max(1, soft - SPARE_FILES)
    return min(requested or DEFAULT_MAX_CONNECTIONS, room)


def _refusal(status: int, reason: str, message: str) -> bytes:
    body = json.dumps(error_body(status, "unavailable", message)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def protocol_class(max_connections: int, read_timeout: float) -> type:
    """uvicorn's h11 protocol with the cap and the deadline above (pass as ``uvicorn.run(http=...)``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    busy = _refusal(
        503,
        "Service Unavailable",
        f"the server has {max_connections} connections open, its limit (--max-connections); retry later",
    )

    class BoundedH11Protocol(H11Protocol):
        _deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(busy)
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()  # a request mid-body sees a disconnect; nobody waits on a reply

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
                self._disarm()  # the request has arrived (or the connection is over): the model's time is free

        def on_response_complete(self) -> None:
            if not self.transport.is_closing():
                self._arm()  # the next request on this connection gets its own deadline
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return BoundedH11Protocol
