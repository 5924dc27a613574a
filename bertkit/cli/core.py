"""``bertkit info`` and ``bertkit tokenize``: look inside a model directory."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import args as A


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("info", help="config, parameter count and vocabulary of a model directory")
    p.add_argument("model_dir", type=Path, metavar="DIR")
    p.set_defaults(func=info)

    p = subparsers.add_parser("tokenize", help="WordPiece tokens and ids of a text")
    p.add_argument("model_dir", type=A.existing_path, metavar="DIR", help="model directory or vocab.txt")
    p.add_argument("text")
    p.add_argument("pair", nargs="?", default=None, help="optional second segment")
    p.add_argument("--max-length", type=A.positive_int, default=None, help="truncate to this many tokens")
    p.set_defaults(func=tokenize)


def info(args: argparse.Namespace) -> dict[str, Any]:
    from safetensors import safe_open

    from ..architectures import encoder_prefixes, load_config, model_type_of
    from ..checkpoint import SAFETENSORS, checkpoint_file, load_state_dict
    from ..tokenizer import Tokenizer

    config = load_config(args.model_dir)
    weights = checkpoint_file(args.model_dir)
    if weights.name == SAFETENSORS:  # count without loading the tensors
        try:
            with safe_open(str(weights), "pt") as f:
                shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
        except Exception as e:  # noqa: BLE001 - truncated/corrupt headers surface as several error types
            raise UserError(f"{weights}: cannot read the weights ({type(e).__name__}: {e})") from None
    else:
        shapes = {k: list(v.shape) for k, v in load_state_dict(args.model_dir).items()}
    n_params = sum(math.prod(shape) for shape in shapes.values())
    encoder = encoder_prefixes(args.model_dir)
    heads = sorted({k.split(".")[0] for k in shapes if not k.startswith(encoder)})
    result: dict[str, Any] = {
        "model_dir": str(args.model_dir),
        "model_type": model_type_of(args.model_dir),
        "architectures": config.architectures,
        "config": config.to_dict(),
        "parameters": n_params,
        "tensors": len(shapes),
        "weights_file": weights.name,
        "heads": heads,
    }
    try:
        tok = Tokenizer.from_pretrained(args.model_dir)
        result["vocab_size"] = len(tok)
        result["lowercase"] = tok.lowercase
    except Exception as e:  # a weights-only directory is still worth describing
        result["vocab_size"] = None
        result["tokenizer_error"] = str(e)
    return result


def tokenize(args: argparse.Namespace) -> dict[str, Any]:
    from ..tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(args.model_dir)
    enc = tok.encode(args.text, args.pair, max_length=args.max_length)
    return {
        "tokens": enc.tokens,
        "ids": enc.ids,
        "type_ids": enc.type_ids,
        "offsets": [list(o) for o in enc.offsets],
    }
