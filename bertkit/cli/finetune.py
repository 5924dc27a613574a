"""``bertkit finetune {glue,classify,squad,ner,swag}``."""

from __future__ import annotations

import argparse

from bertkit.cli import args as A
from bertkit.cli.train_options import add_trainer_arguments, check_trainer_arguments
from bertkit.errors import UserError

__all__ = ["register"]


def _common(p: argparse.ArgumentParser, lr: float = 5e-5, max_seq_length: int = 128) -> None:
    p.add_argument(
        "--model", required=True, help="pre-trained model directory (HF layout: config.json, weights, vocab)"
    )
    A.add_output(
        p, "--out", resumable=True, help="output directory (metrics.json, model/, predictions, loss.png)"
    )
    p.add_argument(
        "--epochs", type=A.positive_float, default=3.0, help="training epochs (paper: 2, 3 or 4; default 3)"
    )
    p.add_argument("--batch-size", type=A.positive_int, default=32, help="paper: 16 or 32 (default 32)")
    p.add_argument(
        "--lr",
        type=A.positive_float,
        default=lr,
        help=f"peak learning rate (paper: 5e-5, 3e-5, 2e-5; default {lr:g})",
    )
    p.add_argument("--max-seq-length", type=A.int_range(8, 512), default=max_seq_length)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--warmup-ratio", type=A.probability, default=0.1, help="fraction of steps of linear warm-up (0.1)"
    )
    p.add_argument("--weight-decay", type=A.non_negative_float, default=0.01)
    p.add_argument(
        "--search",
        action="store_true",
        help="the paper's grid: batch {16,32} x lr {5e-5,3e-5,2e-5} x epochs {2,3,4}, keep the best on dev",
    )
    p.add_argument(
        "--restarts", type=int, default=1, help="N random restarts (seeds seed..seed+N-1), best on dev"
    )
    p.add_argument("--freeze-encoder", action="store_true", help="train only the added layer (BERT frozen)")
    p.add_argument(
        "--max-train-examples", type=int, default=None, help="train on a random subset (quick runs)"
    )
    p.add_argument("--eval-batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_trainer_arguments(p)


def _settings(args: argparse.Namespace, **extra):
    from bertkit.tasks.spec import Settings

    check_trainer_arguments(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return Settings.from_args(args, **extra)


def _run(task, args, **extra) -> dict:
    from bertkit.tasks.finetune import finetune

    return finetune(
        task,
        args.model,
        args.out,
        _settings(args, **extra),
        search=args.search,
        restarts=args.restarts,
        train_file=str(getattr(args, "train", None) or getattr(args, "data_dir", "train")),
    )


def run_glue(args: argparse.Namespace) -> dict:
    from bertkit.tasks.glue import glue_task_data

    split = "dev_mm" if args.task.lower().replace("-", "") in ("mnlimm",) else "dev"
    task = glue_task_data(args.task, args.data_dir, split, predict_test=args.predict_test)
    return _run(task, args)


def run_classify(args: argparse.Namespace) -> dict:
    from bertkit.tasks.classify import classify_task_data

    task = classify_task_data(
        args.train,
        args.dev,
        args.text_field,
        args.pair_field,
        args.label_field,
        regression=args.regression,
        name=args.name,
        multi_label=args.multi_label,
        label_sep=args.label_sep,
    )
    return _run(task, args)


def run_ner(args: argparse.Namespace) -> dict:
    from bertkit.tasks.ner import ner_task_data

    task = ner_task_data(args.train, args.dev, args.test, name=args.name)
    if args.feature_based:
        from bertkit.features import feature_ner, parse_layers

        settings = _settings(args)
        from bertkit.tasks.finetune import _limit
        from bertkit.train.distributed import init_distributed

        if settings.grad_accum > 1 or settings.max_steps or settings.eval_every or init_distributed()[1] > 1:
            raise UserError(
                "--feature-based trains a BiLSTM on frozen features: --grad-accum, --max-steps, --eval-every, "
                "--keep-best and torchrun apply to fine-tuning only; drop them"
            )

        return feature_ner(
            _limit(task.train, settings.max_train_examples, settings.seed),
            task.dev,
            args.model,
            args.out,
            test=task.extra_eval.get("test"),
            layers=parse_layers(args.layers),
            epochs=int(args.epochs),
            batch_size=args.batch_size,
            lr=args.lr,
            hidden_size=args.lstm_hidden,
            max_seq_length=args.max_seq_length,
            seed=args.seed,
            progress=not args.quiet,
            name=f"{args.name}-feature-based",
            checkpoint_every=settings.checkpoint_every,
            resume=settings.resume,
            precision=settings.precision,
        )
    return _run(task, args, use_crf=args.crf, crf_lr=args.crf_lr)


def run_swag(args: argparse.Namespace) -> dict:
    from bertkit.tasks.swag import swag_task_data

    return _run(swag_task_data(args.train, args.dev, name=args.name), args)


def register(subparsers) -> None:
    ft = subparsers.add_parser(
        "finetune", help="fine-tune a pre-trained model on a task; writes metrics.json + model/"
    )
    sub = ft.add_subparsers(dest="task_kind", metavar="TASK")

    p = sub.add_parser("glue", help="a GLUE task from its standard TSV files")
    p.add_argument(
        "--task",
        required=True,
        help="CoLA, SST-2, MRPC, QQP, STS-B, MNLI (MNLI-mm: mismatched dev), QNLI, RTE, WNLI",
    )
    p.add_argument("--data-dir", required=True, help="the task's folder (train.tsv, dev.tsv, ...)")
    p.add_argument(
        "--predict-test",
        action="store_true",
        help="also predict the test file(s) and write the GLUE leaderboard's OUT/<TASK>.tsv (MNLI: MNLI-m.tsv, "
        "MNLI-mm.tsv and AX.tsv when diagnostic.tsv is beside the task or in ../diagnostic/)",
    )
    _common(p)
    p.set_defaults(func=run_glue)

    p = sub.add_parser("classify", help="text (pair) classification or regression from CSV / TSV / JSONL")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--text-field", default="text")
    p.add_argument("--pair-field", default="text_pair", help="second text, used when the column exists")
    p.add_argument("--label-field", default="label")
    p.add_argument("--regression", action="store_true", help="numeric labels, one output, MSE loss")
    p.add_argument(
        "--multi-label",
        action="store_true",
        help="any number of labels per text (a JSON list, or names split by --label-sep): one sigmoid per "
        "label, BCE loss, per-label thresholds tuned on dev, micro/macro F1",
    )
    p.add_argument("--label-sep", default=",", help="--multi-label: separator of the label names (default ,)")
    p.add_argument("--name", default="classify", help="task name written to metrics.json")
    _common(p)
    p.set_defaults(func=run_classify)

    from bertkit.cli.squad import register_squad

    register_squad(sub)

    p = sub.add_parser("ner", help="named-entity recognition from CoNLL files (IOB1/IOB2), conlleval F1")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--test", default=None, help="also evaluate on this file (reported under 'test')")
    p.add_argument("--crf", action="store_true", help="a CRF layer over the token classifier")
    p.add_argument(
        "--crf-lr",
        type=A.positive_float,
        default=5e-3,
        help="learning rate of the CRF transitions (default 5e-3)",
    )
    p.add_argument(
        "--feature-based",
        action="store_true",
        help="no fine-tuning: a two-layer BiLSTM on frozen BERT features (--layers), as in the paper",
    )
    p.add_argument("--layers", default="-1,-2,-3,-4", help="feature-based: layers to concatenate")
    p.add_argument("--lstm-hidden", type=int, default=256, help="feature-based: LSTM size per direction")
    p.add_argument("--name", default="conll2003")
    _common(p)
    p.set_defaults(func=run_ner)

    p = sub.add_parser("swag", help="SWAG multiple choice (sent1, sent2, ending0..3, label)")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--name", default="swag")
    _common(p)
    p.set_defaults(func=run_swag)
