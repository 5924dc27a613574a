"""``bertkit pretrain``: flags, or a TOML/YAML config file (flags given on the command line override it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.cli import args as A
from bertkit.errors import UserError

# flag dest -> PretrainConfig field (same name unless listed)
_FLAGS = (
    "data", "out", "preset", "objective", "steps", "batch_size", "lr", "warmup", "weight_decay", "optimizer",
    "grad_accum", "precision", "max_seq_length", "masked_lm_prob", "max_predictions_per_seq", "short_seq_prob",
    "seed", "log_every", "checkpoint_every", "keep_last", "eval_every", "eval_batches", "clip_norm", "device",
    "distributed", "init_from", "num_threads", "valid_documents", "gradient_checkpointing", "recipe",
    "data_format", "vocab",
)  # fmt: skip


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pretrain",
        help="pre-train BERT (MLM + NSP, or the No-NSP / LTR ablations) on prepared data",
        description=(
            "Pre-train BertForPreTraining on a `bertkit prepare` directory. Writes RUN_DIR/metrics.jsonl, "
            "eval.jsonl, curves.png, checkpoints/ and model/ (Hugging Face layout). Launch with torchrun for "
            "DDP. A config file (TOML or YAML) may hold every flag's setting, a [model] table of BertConfig "
            "overrides and [[phases]] (e.g. 90%% of steps at 128 tokens, then 512)."
        ),
    )
    p.add_argument(
        "--data",
        help="prepared data directory (bertkit prepare --out; with --static its fixed instances are used), "
        "or the original release's TFRecord file(s) (a file or a directory of them; needs --vocab)",
    )
    p.add_argument(
        "--data-format", choices=["auto", "dynamic", "static", "tfrecord"],
        help="the stream: dynamic masking on the fly, the static instances of `prepare --static`, or "
        "TFRecord files of create_pretraining_data.py (default auto: static if the dir has them)",
    )  # fmt: skip
    p.add_argument("--vocab", help="vocab.txt the TFRecord data was made with (a prepared dir has its own)")
    p.add_argument(
        "--cased", dest="lowercase", action="store_false", default=None,
        help="TFRecord data: the saved tokenizer keeps case (default: lowercase, as the uncased models)",
    )  # fmt: skip
    p.add_argument(
        "--out", help="run directory to write (refused if it exists, unless --resume or --overwrite)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out run directory")
    p.add_argument("--preset", choices=["tiny", "mini", "small", "medium", "base", "large"])
    p.add_argument(
        "--config", type=A.existing_file, help="TOML/YAML run config (flags on the command line override it)"
    )
    p.add_argument(
        "--model-config",
        dest="model_config",
        type=A.existing_file,
        help="a config.json to build the model from",
    )
    p.add_argument(
        "--init-from", type=A.existing_dir, help="continue pre-training from a saved model directory"
    )
    from bertkit.objective_names import OBJECTIVES

    p.add_argument(
        "--objective", choices=list(OBJECTIVES),
        help="; ".join(f"{name}: {summary}" for name, summary in OBJECTIVES.items()) + " (default mlm+nsp)",
    )  # fmt: skip
    p.add_argument(
        "--objective-option", dest="objective_options", action="append", type=_option, metavar="KEY=VALUE",
        help="an objective's own setting, repeatable (electra: generator_fraction=0.25, "
        "discriminator_weight=50, mask_token_prob=0.85)",
    )  # fmt: skip
    p.add_argument("--steps", type=A.positive_int)
    p.add_argument("--batch-size", type=A.positive_int, help="global batch per optimizer step")
    p.add_argument("--grad-accum", type=A.positive_int)
    p.add_argument("--lr", type=A.positive_float, help="peak learning rate (default: from --recipe)")
    p.add_argument(
        "--warmup", type=A.non_negative_float,
        help="steps (>= 1) or a fraction of all steps (< 1) (default: from --recipe)",
    )  # fmt: skip
    p.add_argument(
        "--recipe", choices=["auto", "cpu", "paper"],
        help="lr/warm-up/batch/masking defaults: cpu (lr 1e-3 tiny, 5e-4 mini, 2.5e-4 small; 6%% warm-up; batch 16; "
        "40%% masked), paper (lr 1e-4, 1%% warm-up, batch 256, 15%% masked); auto (default) picks cpu for the "
        "small presets",
    )  # fmt: skip
    p.add_argument("--weight-decay", type=A.non_negative_float)
    p.add_argument("--optimizer", choices=["adamw", "lamb"])
    p.add_argument("--clip-norm", type=A.non_negative_float)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16", "auto"])
    p.add_argument(
        "--gradient-checkpointing", action="store_true", default=None,
        help="recompute encoder layers in the backward pass (less memory for 512-token phases)",
    )  # fmt: skip
    p.add_argument("--max-seq-length", type=A.int_range(8, 8192))
    p.add_argument("--masked-lm-prob", type=A.open_probability,
                   help="share of tokens masked (default: from --recipe: cpu 0.4, paper 0.15)")  # fmt: skip
    p.add_argument("--max-predictions-per-seq", type=A.positive_int,
                   help="cap on masked tokens per sequence (default: round(rate x length) + 1, 20 at 15%% of 128)")  # fmt: skip
    p.add_argument("--short-seq-prob", type=A.probability)
    p.add_argument("--whole-word-mask", action="store_true", default=None)
    p.add_argument("--seed", type=int)
    p.add_argument("--log-every", type=A.positive_int)
    p.add_argument("--checkpoint-every", type=A.non_negative_int,
                   help="steps between checkpoints (default 200; 0: none); with checkpoints, SIGTERM or Ctrl-C "
                   "checkpoints the step in progress and stops, and --resume continues from it")  # fmt: skip
    p.add_argument("--keep-last", type=A.non_negative_int)
    p.add_argument("--eval-every", type=A.non_negative_int)
    p.add_argument("--eval-batches", type=A.non_negative_int)
    p.add_argument("--valid-documents", type=A.non_negative_int)
    p.add_argument("--device", type=A.device, help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--distributed", choices=["ddp", "fsdp"], help="wrapper under torchrun (default ddp)")
    p.add_argument("--num-threads", type=A.positive_int, help="torch CPU threads")
    p.add_argument("--tensorboard", action="store_true", default=None, help="also log to RUN_DIR/tb")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_pretrain)


def _option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, value), the value read as JSON where it parses (numbers, true/false), else text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), A.json_or_text(value)


def config_from_args(args: argparse.Namespace):
    from bertkit.pretrain import PretrainConfig, load_config_file

    data = load_config_file(args.config) if getattr(args, "config", None) else {}
    for name in (*_FLAGS, "model_config", "whole_word_mask", "tensorboard", "lowercase"):
        v = getattr(args, name, None)
        if v is not None:
            data[name] = str(v) if isinstance(v, Path) else v
    if getattr(args, "objective_options", None):
        data["objective_options"] = {**data.get("objective_options", {}), **dict(args.objective_options)}
    if getattr(args, "quiet", False):
        data["progress"] = False
    if not data.get("data"):
        raise UserError("--data is required (or `data = ...` in the --config file)")
    if not data.get("out"):
        raise UserError("--out is required (or `out = ...` in the --config file)")
    return PretrainConfig.from_dict(data, source=str(args.config or "flags"))


def run_pretrain(args: argparse.Namespace) -> dict:
    from bertkit.pretrain import pretrain

    cfg = config_from_args(args)
    # the run dir may come from the config file, so it is claimed here rather than by add_output
    with A.claim_output(cfg.out, overwrite=args.overwrite, resume=args.resume, resumable=True):
        return pretrain(cfg, resume=args.resume)
