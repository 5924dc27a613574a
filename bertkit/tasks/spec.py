"""What a fine-tuning task is (:class:`TaskData`) and how it is trained (:class:`Settings`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class Settings:
    epochs: float = 3
    batch_size: int = 32
    lr: float = 2e-5
    max_seq_length: int = 128
    seed: int = 42
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    freeze_encoder: bool = False
    max_train_examples: int | None = None
    eval_batch_size: int = 128
    use_crf: bool = False
    # The CRF's transition scores start at zero and at the encoder's learning rate barely move in a few
    # epochs (the CRF then changes nothing); as usual for BERT + CRF they get their own, larger rate.
    crf_lr: float = 5e-3
    progress: bool = True
    checkpoint_every: int = 0  # optimizer steps between training checkpoints; 0: none
    resume: bool = False  # continue from the newest checkpoint of the run's directory
    precision: str = "fp32"  # or "bf16" (autocast), "fp16" (autocast + gradient scaler; CUDA only)
    gradient_checkpointing: bool = False  # recompute encoder layers in backward (long sequences, less memory)
    grad_accum: int = 1  # batches per optimizer step (the effective batch is batch_size * grad_accum * ranks)
    max_steps: int | None = None  # optimizer steps; overrides epochs when set
    eval_every: int = 0  # evaluate on dev every N optimizer steps (eval.jsonl); 0: only after training
    keep_best: bool = False  # keep the weights best on the main dev metric (needs eval_every)
    distributed: str = "ddp"  # under torchrun: "ddp" (replicas) or "fsdp" (parameters sharded over the ranks)

    @classmethod
    def from_args(cls, args: Any, **overrides: Any) -> Settings:
        """The settings a command's parsed arguments give by the same names (``quiet`` turns ``progress``
        off); ``overrides`` win, and what neither gives keeps its default."""
        given = {
            f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None
        }
        if getattr(args, "quiet", False):
            given["progress"] = False
        return cls(**{**given, **overrides})


@dataclass
class TaskData:
    """What the driver needs from a task reader.

    kind: ``seq`` (examples with ``text_a``, ``text_b``, ``label``), ``token`` (sentences with ``words``,
    ``tags``) or ``choice`` (examples with ``context``, ``endings``, ``label``).
    labels: label names in id order; None for regression. metric(preds, gold) -> dict of scores.
    """

    name: str
    kind: str
    train: list
    dev: list
    labels: list[str] | None
    metric: Callable[[list, list], dict]
    main_metric: str
    dev_file: str = "dev"
    extra_eval: dict[str, list] = field(default_factory=dict)  # e.g. {"test": sentences}
    # unlabelled sets to predict after training, each written by write_predict_set(path, examples, preds)
    # as OUT/<name>.tsv (the GLUE leaderboard files)
    predict_sets: dict[str, list] = field(default_factory=dict)
    write_predict_set: Callable[[Path, list, list], None] | None = None
    multi_label: bool = False  # seq examples whose label is a list of names (BCE; see tasks/multilabel.py)
