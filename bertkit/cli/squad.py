"""``bertkit finetune squad``: the command-line options of SQuAD fine-tuning (the work is in
:mod:`bertkit.tasks.squad_train`)."""

from __future__ import annotations

import argparse

from bertkit.cli import args as A
from bertkit.cli.train_options import add_trainer_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """SQuAD-specific options of ``bertkit finetune squad``."""
    parser.add_argument("--train", required=True, help="SQuAD JSON to train on")
    parser.add_argument("--dev", default=None, help="SQuAD JSON to evaluate on (or use --dev-articles)")
    parser.add_argument(
        "--version", choices=["1.1", "2.0"], default="1.1", help="SQuAD version (2.0: unanswerable questions)"
    )
    parser.add_argument(
        "--dev-articles",
        type=int,
        default=None,
        metavar="N",
        help="without --dev: evaluate on the last N articles of --train and train on the rest",
    )
    parser.add_argument(
        "--train-articles", type=int, default=None, metavar="N", help="train on the first N articles only"
    )
    parser.add_argument(
        "--doc-stride", type=int, default=128, help="step between window starts, in tokens (default 128)"
    )
    parser.add_argument("--max-query-length", type=int, default=64, help="question tokens kept (default 64)")
    parser.add_argument("--n-best-size", type=int, default=20, help="candidates per example (default 20)")
    parser.add_argument(
        "--max-answer-length", type=int, default=30, help="longest answer in tokens (default 30)"
    )
    parser.add_argument(
        "--null-score-diff-threshold",
        type=float,
        default=0.0,
        help='v2.0: predict "" when null score - best span score exceeds this (default 0.0)',
    )
    parser.add_argument(
        "--eval-batch-size", type=int, default=64, help="windows per evaluation batch (default 64)"
    )
    parser.add_argument(
        "--warmup-ratio",
        type=A.probability,
        default=0.1,
        help="fraction of steps for linear warm-up (default 0.1)",
    )


def register_squad(sub) -> None:
    """``bertkit finetune squad`` under the ``finetune`` sub-parsers ``sub``."""
    p = sub.add_parser(
        "squad",
        help="SQuAD v1.1 / v2.0 span extraction (writes predictions.json, null_odds.json for v2)",
    )
    p.add_argument("--model", required=True, help="pre-trained model directory (HF layout)")
    A.add_output(p, "--out", resumable=True, help="output directory (metrics.json, predictions.json, model/)")
    p.add_argument("--epochs", type=float, default=None, help="default: 3 for v1.1, 2 for v2.0 (the paper)")
    p.add_argument("--batch-size", type=int, default=None, help="default 32")
    p.add_argument("--lr", type=A.positive_float, default=None, help="default 5e-5")
    p.add_argument("--max-seq-length", type=int, default=None, help="default 384")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--weight-decay", type=A.non_negative_float, default=0.01)
    p.add_argument("--freeze-encoder", action="store_true", help="train only qa_outputs (BERT frozen)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_trainer_arguments(p)
    add_arguments(p)  # SQuAD's own options

    def run_squad(args: argparse.Namespace) -> dict:
        if getattr(args, "threads", None):
            import torch

            torch.set_num_threads(args.threads)
        from bertkit.tasks import squad_train

        return squad_train.run(args)

    p.set_defaults(func=run_squad)
