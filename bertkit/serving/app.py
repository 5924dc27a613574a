"""The FastAPI application: middleware, lifespan, and the routes of ``serving.routes`` (one module each,
mounted from its one table).

Errors all take the one path of ``errors.install_handlers``; the body limit is checked by
``limits.BodyLimit`` before any parsing.
"""

import os
import time
from typing import Any

from ..errors import UserError
from .access_log import AccessLog
from .connections import DEFAULT_KEEP_ALIVE, DEFAULT_READ_TIMEOUT, connection_cap, protocol_class
from .cors import add_cors, check_origin
from .errors import install_handlers
from .headers import ApiKey, RequestMeta
from .limits import BodyLimit, Limits
from .metrics import Metrics
from .service import InferenceService

INSTALL_HINT = "the server needs FastAPI, uvicorn and prometheus-client: pip install 'bertkit[serve]'"


def require_server_deps() -> None:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT) from None


class _Timing:
    """ASGI middleware: request count and latency per known route (unknown paths count as "other")."""

    def __init__(self, app: Any, metrics: Metrics, routes: set[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope.get("path", "")
        route = route if route in self.routes else "other"
        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.metrics.requests.labels(route).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)


def create_app(
    service: "InferenceService | str | os.PathLike",
    docs: bool = False,
    threads: int = 256,
    api_key: str | None = None,
    cors_origins: list[str] | None = None,
    access_log: bool = False,
    **service_kwargs: Any,
):
    """The ASGI application for a model directory (or an already-built service).

    ``docs=True`` serves ``/docs`` and ``/openapi.json`` (off by default: they describe the server to
    anyone who can reach it). ``threads``: request threads (each waits on the batcher while its batch runs).
    ``api_key``: every route but /health then needs ``Authorization: Bearer KEY`` (``headers.ApiKey``).
    ``cors_origins``: the origins whose browser pages may call the server (``cors``; none by default).
    ``access_log``: one JSON line per request on stderr (``access_log.AccessLog``).
    """
    if api_key is not None and not api_key:
        raise UserError("--api-key must not be empty")
    cors_origins = [check_origin(o) for o in cors_origins or []]  # before the model loads
    require_server_deps()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    from .routes import register

    metrics = Metrics()
    svc = service if isinstance(service, InferenceService) else InferenceService(service, **service_kwargs)
    svc.batcher.on_batch = metrics.on_batch
    metrics.queue.set_function(svc.batcher.queue_depth)

    @asynccontextmanager
    async def lifespan(app):
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        yield
        svc.close()

    app = FastAPI(
        title="bertkit",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.service = svc
    app.state.metrics = metrics
    install_handlers(app, on_error=metrics.on_error)

    register(app, svc)
    known = {r.path for r in app.routes if hasattr(r, "path")}
    # the last added runs first: ids and timing on every answer, then the key, then the body limit
    app.add_middleware(BodyLimit, max_bytes=svc.limits.max_body_bytes, on_error=metrics.on_error)
    if api_key is not None:
        app.add_middleware(ApiKey, key=api_key, on_error=metrics.on_error)
    app.add_middleware(_Timing, metrics=metrics, routes=known)
    add_cors(app, cors_origins)  # outside the key: a browser's preflight carries none
    app.add_middleware(RequestMeta)
    if access_log:  # outermost: it sees every answer, refusals included, with its request id
        app.add_middleware(AccessLog)
    return app


def serve(
    model_dir: "str | os.PathLike",
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "info",
    max_connections: int | None = None,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    access_log: bool = False,
    **app_kwargs: Any,
) -> None:
    """Build the app (:func:`create_app` with ``access_log`` and ``app_kwargs``) and run it with uvicorn until
    interrupted. ``max_connections``, ``read_timeout`` and ``keep_alive`` bound what each client connection
    may hold (bertkit.serving.connections)."""
    require_server_deps()
    try:
        import uvicorn
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    app = create_app(model_dir, access_log=access_log, **app_kwargs)
    # h11's own limit on headers stays; the body limit is ours (BodyLimit)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level == "debug" and not access_log,  # ours replaces uvicorn's text lines
        http=protocol_class(connection_cap(max_connections), read_timeout),
        timeout_keep_alive=keep_alive,
    )


__all__ = ["INSTALL_HINT", "Limits", "create_app", "require_server_deps", "serve"]
