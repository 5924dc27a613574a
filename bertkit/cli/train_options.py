"""The training-run options every ``finetune`` subcommand shares (the generic Trainer's), and their checks."""

from __future__ import annotations

import argparse


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: use 0 (off) or a number of steps")
    return value


def add_trainer_arguments(p: argparse.ArgumentParser) -> None:
    """The training-run options every ``finetune`` subcommand shares (the generic Trainer's)."""
    p.add_argument(
        "--checkpoint-every",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="write a resumable checkpoint every N steps under OUT/checkpoints (with --restarts/--search: "
        "OUT/runs/RUN/checkpoints; default 0: none)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint (each run's own); finished runs are only evaluated again",
    )
    p.add_argument(
        "--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast (default fp32)"
    )
    p.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute each encoder layer in the backward pass: far less activation memory for long "
        "sequences (e.g. SQuAD's 384), about a third more compute",
    )
