"""``bertkit serve MODEL_DIR``: the HTTP inference server (FastAPI + uvicorn; see docs/guide/serving.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import settings
from ..serving.connections import DEFAULT_KEEP_ALIVE, DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT
from ..serving.int8_engines import ENGINES
from ..serving.limits import Limits
from . import args as A

# the Limits fields a flag sets (--max-body-bytes, ...), and the flags' help
LIMIT_FLAGS = (
    ("max_body_bytes", "largest request body (413)"),
    ("max_text_chars", "longest text (413)"),
    ("max_batch_size", "most texts per request (413)"),
    (
        "max_request_tokens",
        "most tokens of model work one request may ask for, bounded before tokenisation (413)",
    ),
    (
        "max_fill_mask_predictions",
        "most [MASK]s x top_k one /fill-mask request may ask for (413; default %(default)s)",
    ),
    (
        "max_embed_all_values",
        "most floats (tokens x hidden size) one /embed_all answer may hold (413; default %(default)s)",
    ),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    d = Limits()
    p = subparsers.add_parser(
        "serve",
        help="HTTP server: /embed /v1/embeddings /rerank /predict /fill-mask /similarity /tokenize ... "
        "(TEI and OpenAI shapes), playground at /",
        description="Serve a model directory over HTTP (needs: pip install 'bertkit[serve]'). "
        "/predict needs a sequence-classification dir, /fill-mask an MLM or pre-training dir. "
        "Every request is bounded by the limits below; over a limit -> 413/422 naming it.",
    )
    p.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument(
        "--port", type=A.int_range(0, 65535), default=8080, help="TCP port (default 8080; 0: any free port)"
    )
    p.add_argument(
        "--device", type=A.device, default=None, help="cpu, cuda, ... (default: cuda if available)"
    )
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument(
        "--docs",
        action="store_true",
        help="serve /docs and /openapi.json (off by default; the /docs page loads Swagger UI's scripts from "
        "a CDN, so it needs a browser with internet access: offline, read /openapi.json)",
    )
    p.add_argument(
        "--model-id", default=None, help="the name /info and /v1/embeddings report (default: dir name)"
    )
    p.add_argument(
        "--api-key",
        default=settings.api_key(),
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health (401 otherwise; default: "
        "the environment's key (bertkit.settings), else off; the variable keeps it out of the process list)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let browser pages from ORIGIN (scheme://host[:port], or * for any) call the server; "
        "repeat for several (default: no CORS headers, so other origins' pages cannot read answers)",
    )
    p.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="one JSON line per request on stderr: ts, method, path, status, ms, request_id (default: off)",
    )
    g = p.add_argument_group("limits (per request)")
    for name, text in LIMIT_FLAGS:
        flag = "--" + name.replace("_", "-")
        g.add_argument(flag, type=A.positive_int, default=getattr(d, name), help=text)
    g.add_argument(
        "--max-length", type=A.positive_int, default=None, help="tokens per sequence (default: the model's)"
    )
    g.add_argument(
        "--auto-truncate",
        action="store_true",
        help="cut TEI-shaped and OpenAI inputs over --max-length when a request does not say truncate "
        "(as TEI's --auto-truncate; default: refuse them with 413, as TEI does)",
    )
    g.add_argument(
        "--long-text",
        choices=("truncate", "windows"),
        default="truncate",
        help="texts over --max-length: cut them, or run overlapping windows and average (embed, predict)",
    )
    g.add_argument(
        "--window-stride", type=A.positive_int, default=None, help="windows: tokens between window starts"
    )
    c = p.add_argument_group("connections")
    c.add_argument(
        "--max-connections",
        type=A.positive_int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="open client connections; more are answered 503 and closed (default %(default)s, at most the "
        "open-file limit less 64)",
    )
    c.add_argument(
        "--read-timeout",
        type=A.positive_float,
        default=DEFAULT_READ_TIMEOUT,
        metavar="S",
        help="seconds a request's headers and body may take to arrive; slower connections are closed "
        "(default %(default)s)",
    )
    c.add_argument(
        "--keep-alive",
        type=A.positive_float,
        default=DEFAULT_KEEP_ALIVE,
        metavar="S",
        help="seconds an idle connection stays open between requests (default %(default)s)",
    )
    b = p.add_argument_group("batching")
    b.add_argument(
        "--max-batch-tokens", type=A.positive_int, default=16_384, help="padded tokens per model batch"
    )
    b.add_argument(
        "--max-wait-ms", type=A.non_negative_float, default=5.0, help="longest wait to fill a batch"
    )
    b.add_argument("--workers", type=A.positive_int, default=1, help="model worker threads")
    b.add_argument(
        "--no-batching", action="store_true", help="one request per batch (no cross-request merging)"
    )
    p.add_argument(
        "--int8",
        action="store_true",
        help="dynamic int8 quantisation of the Linear layers (CPU; docs/guide/serving.md)",
    )
    p.add_argument(
        "--int8-engine",
        choices=ENGINES,
        default="auto",
        help="--int8: the int8 GEMM to pack the weights for (auto: onednn on a CPU with AMX int8, else "
        "PyTorch's default)",
    )
    A.add_inference_precision(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    from ..serving import serve
    from ..serving.cors import check_origin

    origins = [check_origin(o) for o in args.cors_origin]  # refused before the model loads
    limits = Limits(**{name: getattr(args, name) for name, _ in LIMIT_FLAGS})
    serve(
        args.model_dir,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        docs=args.docs,
        max_connections=args.max_connections,
        read_timeout=args.read_timeout,
        keep_alive=args.keep_alive,
        api_key=args.api_key,
        cors_origins=origins,
        access_log=args.access_log,
        limits=limits,
        max_length=args.max_length,
        device=args.device,
        long_text=args.long_text,
        auto_truncate=args.auto_truncate,
        window_stride=args.window_stride,
        model_id=args.model_id,
        int8=args.int8,
        int8_engine=args.int8_engine,
        precision=args.precision,
        batching={
            "max_batch_tokens": args.max_batch_tokens,
            "max_wait_ms": args.max_wait_ms,
            "workers": args.workers,
            "enabled": not args.no_batching,
        },
    )
    return None
