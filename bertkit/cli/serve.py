"""``bertkit serve MODEL_DIR``: an HTTP inference server (FastAPI + uvicorn)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="HTTP server: /health /info /embed /predict /fill-mask /tokenize",
        description="Serve a model directory over HTTP (needs: pip install 'bertkit[serve]'). "
        "/predict needs a sequence-classification dir, /fill-mask an MLM or pre-training dir.",
    )
    p.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--max-batch-size", type=int, default=64, help="most texts accepted per request")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    from ..errors import UserError
    from ..serve import serve

    if args.max_batch_size < 1:
        raise UserError(f"--max-batch-size must be >= 1, got {args.max_batch_size}")
    if not 0 <= args.port < 65536:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    serve(
        args.model_dir,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        device=args.device,
        log_level=args.log_level,
    )
    return None
