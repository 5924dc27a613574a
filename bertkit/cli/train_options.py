"""The training-run options every ``finetune`` subcommand shares (the generic Trainer's), and their checks."""

from __future__ import annotations

import argparse
from typing import Any

from bertkit.cli import args as A
from bertkit.errors import UserError


def add_trainer_arguments(p: argparse.ArgumentParser) -> None:
    """The training-run options every ``finetune`` subcommand shares (the generic Trainer's)."""
    p.add_argument(
        "--checkpoint-every",
        type=A.non_negative_int,
        default=0,
        metavar="N",
        help="write a resumable checkpoint every N steps under OUT/checkpoints (with --restarts/--search: "
        "OUT/runs/RUN/checkpoints; default 0: none); with checkpoints, SIGTERM or Ctrl-C checkpoints the step in "
        "progress and stops",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint (each run's own); finished runs are only evaluated again",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16", "auto"],
        default="fp32",
        help="bf16: autocast (CPU or GPU); fp16: autocast with a gradient scaler, CUDA only; auto: bf16 where "
        "it measured faster on this CPU and its loss agreed, else fp32 (default fp32)",
    )
    p.add_argument(
        "--grad-accum",
        type=A.positive_int,
        default=1,
        metavar="N",
        help="accumulate the gradients of N batches per optimizer step (effective batch: batch size x N x "
        "processes; default 1)",
    )
    p.add_argument(
        "--max-steps",
        type=A.positive_int,
        default=None,
        metavar="N",
        help="train for N optimizer steps (overrides --epochs; the schedule spans the N steps)",
    )
    p.add_argument(
        "--eval-every",
        type=A.non_negative_int,
        default=0,
        metavar="N",
        help="evaluate on dev every N optimizer steps (OUT/eval.jsonl; default 0: after training only)",
    )
    p.add_argument(
        "--keep-best",
        action="store_true",
        help="with --eval-every: keep the weights best on the task's main dev metric (saved as the model; "
        "also under OUT/best/)",
    )
    p.add_argument(
        "--distributed",
        choices=["ddp", "fsdp"],
        default="ddp",
        help="under torchrun: ddp (a replica per process) or fsdp (parameters, gradients and optimizer state "
        "sharded over the processes); one process trains unwrapped either way (default ddp)",
    )
    p.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute each encoder layer in the backward pass: far less activation memory for long "
        "sequences (e.g. SQuAD's 384), about a third more compute",
    )


def check_trainer_arguments(args: Any) -> None:
    """Combinations argparse cannot check: fp16 needs CUDA, --keep-best needs --eval-every."""
    if getattr(args, "precision", "fp32") == "fp16":
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                "--precision fp16: needs a CUDA GPU (it trains with a gradient scaler); on CPU use "
                "--precision bf16 or fp32"
            )
    if getattr(args, "keep_best", False) and not getattr(args, "eval_every", 0):
        raise UserError("--keep-best: give --eval-every N too (how often to evaluate on dev)")
