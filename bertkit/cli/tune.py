"""``bertkit tune``: make this machine's per-machine choices now and record them (:mod:`bertkit.tuning`)."""

from __future__ import annotations

import argparse
from typing import Any

from . import args as A


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune",
        help="measure this machine's fast-path choices now and record them beside the cache",
        description=(
            "Choose this machine's CPU fast paths (the fp32 GEMM backend, the tokenizer's plain-text path) "
            "and record them in the per-machine cache (kernels.json), so that no later command measures "
            "them; prints the choices as JSON. A choice already recorded is kept unless --force."
        ),
    )
    p.add_argument(
        "--num-threads",
        type=A.positive_int,
        default=None,
        help="record the choices for this many threads, as a run with --num-threads N uses (default: torch's)",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--show", action="store_true", help="print what is recorded, measuring nothing")
    what.add_argument("--force", action="store_true", help="measure again, even what is recorded")
    p.set_defaults(func=tune)


def tune(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from ..tuning import recorded_choices
    from ..tuning import tune as make_choices

    if args.num_threads is not None:  # a choice holds for one thread count (bertkit.tuning.machine_key)
        torch.set_num_threads(args.num_threads)
    return recorded_choices() if args.show else make_choices(force=args.force)
