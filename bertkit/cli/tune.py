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
            "Choose this machine's CPU fast paths (the fp32 GEMM backend, how bf16 attention runs in "
            "training, the tokenizer's plain-text path) and record them in the per-machine cache "
            "(kernels.json), so that no later command measures them; prints the choices as JSON. A choice "
            "already recorded is kept unless --force."
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


SAMPLE_WORDS = (
    "the of and to in is was for on that with as by at from his her an which are this be had it not were "
    "one all their has been they would there more when who will time year first other new two its after "
    "people city world state between under during called river house music history"
).split()


def decide_sample_fast_path(force: bool = False) -> tuple[str, str]:
    """The fast-path choice ("on" or "off") made on a vocabulary of :data:`SAMPLE_WORDS`, and where it came
    from (:func:`bertkit.tuning.decide`; ``force``: measured again) - what ``bertkit tune`` records."""
    from ..tokenizer import Tokenizer
    from ..tokenizer_fast_path import decide_fast_path

    tok = Tokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *SAMPLE_WORDS, ",", "."])
    return decide_fast_path(tok._tok, tok._fast_tok, tok.ids_to_tokens, force)


def make_choices(force: bool = False) -> dict[str, Any]:
    """Make this machine's choices that do not depend on a model (the fp32 GEMM backend, how bf16 attention
    runs in training, the tokenizer's plain-text path) now, and record them in the cache: each is taken from
    the cache where it is recorded there, measured otherwise (``force``: measured again). Returns :func:`bertkit.tuning.recorded_choices`
    with the choices made and where each came from ("sources"). The bf16-or-fp32 choices of ``--precision
    auto`` depend on the model and its batch shape: they are measured by the first run of each and recorded
    beside these. (Here, above the modules it asks, so that :mod:`bertkit.tuning` imports none of them.)"""
    from .. import settings
    from ..errors import UserError
    from ..kernels.attention import decide_bf16_attention
    from ..kernels.gemm import decide_linear
    from ..tuning import recorded_choices

    if not settings.choice_cache_enabled():
        raise UserError(
            f"{settings.CHOICE_CACHE.name}={settings.CHOICE_CACHE.raw()} turns the choice cache off, so nothing "
            "would be recorded; unset it to tune"
        )
    made = {
        "linear": decide_linear(force),
        "bf16_attention": decide_bf16_attention(force),
        "tokenizer_fast_path": decide_sample_fast_path(force),
    }
    out = recorded_choices()
    out["choices"] |= {k: choice for k, (choice, _) in made.items()}
    out["sources"] = {k: source for k, (_, source) in made.items()}
    return out


def tune(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from ..tuning import recorded_choices

    if args.num_threads is not None:  # a choice holds for one thread count (bertkit.tuning.machine_key)
        torch.set_num_threads(args.num_threads)
    return recorded_choices() if args.show else make_choices(force=args.force)
