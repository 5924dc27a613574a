"""The HTTP server (``bertkit serve``): one process for every head a BERT dir has.

- ``app``: the FastAPI application (middleware, lifespan, the route table) and ``serve()``
- ``routes``: one module per route (bertkit's, TEI's and OpenAI's request shapes) and the table of them
- ``service``: the model behind them, usable without HTTP
- ``batching``: cross-request dynamic batching (token budget, maximum wait, N workers)
- ``limits`` / ``errors``: what a request may cost, and the one error path
- ``metrics``: Prometheus ``/metrics``
- ``launch``: start a server command on a free port and wait for ``/health`` (tests, benchmarks, scripts)
"""

from .app import INSTALL_HINT, create_app, require_server_deps, serve
from .batching import Batcher
from .limits import Limits
from .service import InferenceService

__all__ = [
    "INSTALL_HINT",
    "Batcher",
    "InferenceService",
    "Limits",
    "create_app",
    "require_server_deps",
    "serve",
]
