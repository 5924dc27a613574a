"""The ``bertkit`` command: a thin layer that parses arguments, calls the library and prints JSON.

Each module named in ``SUBCOMMAND_MODULES`` defines ``register(subparsers)``; every subcommand's
handler takes the parsed ``args`` and returns a JSON-able dict, which ``main`` prints.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..errors import UserError

SUBCOMMAND_MODULES = (
    "core",
    "data",
    "pretrain",
    "finetune",
    "predict",
    "embed",
    "serve",
    "index",
    "experiment",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="bertkit: WordPiece, BERT pre-training, fine-tuning, embeddings and serving on PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        spec = importlib.util.find_spec(f"{__name__}.{name}")
        if spec is None:  # a capability not built yet
            continue
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from bertkit.io import resolve_model_dir

    # A run's output dir (OUT, holding OUT/model) works wherever a model dir is expected.
    for name in ("model_dir", "model"):
        if isinstance(getattr(args, name, None), (str, Path)):
            setattr(args, name, type(getattr(args, name))(resolve_model_dir(getattr(args, name))))
    try:
        result = args.func(args)
    except UserError as e:
        print(f"bertkit {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130
    if result is not None:
        try:
            print(json.dumps(result, indent=2, ensure_ascii=False))
        except BrokenPipeError:  # e.g. piped into `head`: the reader has gone, nothing left to say
            sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
