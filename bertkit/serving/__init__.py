"""The HTTP server (``bertkit serve``): one process for every head a BERT dir has.

- ``app``: the FastAPI application (middleware, lifespan, the route table) and ``serve()``
- ``routes``: one module per route (bertkit's, TEI's and OpenAI's request shapes) and the table of them
- ``service``: the model behind them, usable without HTTP
- ``batching``: cross-request dynamic batching (token budget, maximum wait, N workers)
- ``limits`` / ``errors``: what a request may cost, and the one error path
- ``metrics``: Prometheus ``/metrics``
- ``launch``: start a server command on a free port and wait for ``/health`` (tests, benchmarks, scripts)
"""

from ..lazy import lazy_getattr

_EXPORTS = {
    "INSTALL_HINT": "app",
    "create_app": "app",
    "require_server_deps": "app",
    "serve": "app",
    "Batcher": "batching",
    "Limits": "limits",
    "InferenceService": "service",
}

# Lazy: the CLI's parser reads constants from ``serving.connections``/``limits`` for every command, and
# importing the app and the service here pulled torch (~1.3 CPU-s) into `bertkit prepare`.
__getattr__ = lazy_getattr(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
