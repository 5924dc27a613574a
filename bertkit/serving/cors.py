"""An opt-in CORS allow-list (``bertkit serve --cors-origin ORIGIN``, repeatable).

Without it the server sends no CORS headers, so a browser page from another origin cannot read its
answers. With it, Starlette's ``CORSMiddleware`` answers preflights and marks the answers to the listed
origins only: a page from any other origin is refused by the browser as before. It sits outside the
api-key check, because a browser's preflight carries no ``Authorization`` header.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..errors import UserError

# what a page may send and read: the request shapes are JSON, the key a bearer header
ALLOW_METHODS = ("GET", "POST")
ALLOW_HEADERS = ("authorization", "content-type", "x-request-id")
EXPOSE_HEADERS = ("x-request-id", "x-compute-time")


def check_origin(origin: str) -> str:
    """``scheme://host[:port]`` (what a browser sends in ``Origin``), or ``*`` for any origin.

    A trailing slash is dropped; a path, query or user part is refused in one line, since the
    browser's ``Origin`` never carries one and such an entry would never match."""
    if origin == "*":
        return origin
    value = origin[:-1] if origin.endswith("/") else origin
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises on a port that is not a number or out of range
    except ValueError:
        parts = None
    ok = (
        parts is not None
        and parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not (parts.path or parts.query or parts.fragment or parts.username or parts.password)
    )
    if not ok:
        raise UserError(
            f"--cors-origin {origin!r} is not an origin: give scheme://host[:port] "
            "(e.g. https://example.com or http://localhost:3000), or * for any origin"
        )
    return value.lower()


def add_cors(app: Any, origins: list[str]) -> None:
    """Add the allow-list to ``app`` (nothing when ``origins`` is empty)."""
    if not origins:
        return
    from starlette.middleware.cors import CORSMiddleware

    app.add_middleware(
        CORSMiddleware,
        allow_origins=[check_origin(o) for o in origins],
        allow_methods=ALLOW_METHODS,
        allow_headers=ALLOW_HEADERS,
        expose_headers=EXPOSE_HEADERS,
    )


__all__ = ["add_cors", "check_origin"]
