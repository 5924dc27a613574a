"""The usual set-up for a short fine-tuning-style run: shuffled batches, AdamW, linear warm-up and decay."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from torch import nn

from bertkit.train.batches import Batches
from bertkit.train.loop import Trainer
from bertkit.train.optim import build_optimizer, linear_schedule, warmup_steps_of_ratio
from bertkit.train.options import Schedule

S = TypeVar("S", bound="AdamWSettings")


@dataclass
class AdamWSettings:
    """The settings of an :func:`adamw_trainer` run; the commands built on it extend them."""

    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    precision: str = "fp32"
    log_every: int = 10

    @classmethod
    def from_args(cls: type[S], args: Any) -> S:
        """The settings a command's parsed arguments give by the same names; the others keep their defaults."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})

    def trainer(
        self, model: nn.Module, items: Sequence[Any], collate_fn: Callable[[list], Any], **trainer_kwargs: Any
    ) -> tuple[Trainer, int]:
        """:func:`adamw_trainer` with these settings; ``trainer_kwargs`` go to ``Trainer``."""
        s = self
        return adamw_trainer(
            model, items, s.batch_size, collate_fn,
            epochs=s.epochs, lr=s.lr, weight_decay=s.weight_decay, warmup_ratio=s.warmup_ratio, seed=s.seed,
            precision=s.precision, log_every=s.log_every, **trainer_kwargs,
        )  # fmt: skip


def adamw_trainer(
    model: nn.Module,
    items: Sequence[Any],
    batch_size: int,
    collate_fn: Callable[[list], Any],
    *,
    epochs: float,
    lr: float,
    weight_decay: float,
    warmup_ratio: float,
    seed: int,
    **trainer_kwargs: Any,
) -> tuple[Trainer, int]:
    """(Trainer, steps) for ``epochs`` passes over ``items``. An epoch is ``len(items) // batch_size`` steps,
        because ``Batches`` drops each epoch's ragged end (``Batches`` refuses fewer items than one batch). ``trainer_kwargs`` go to
        ``Trainer`` (out_dir, loss_fn, and option groups or their fields: precision, progress, ...;
    :mod:`bertkit.train.options`)."""
    steps = max(1, math.ceil(len(items) // batch_size * epochs))  # >= 1 also for a tiny fraction of an epoch
    opt = build_optimizer(model, "adamw", lr=lr, weight_decay=weight_decay)
    trainer = Trainer(
        model,
        opt,
        linear_schedule(opt, warmup_steps=warmup_steps_of_ratio(warmup_ratio, steps), total_steps=steps),
        train_batches=Batches(items, batch_size, collate_fn, seed=seed),
        schedule=Schedule(max_steps=steps, seed=seed),
        **trainer_kwargs,
    )
    return trainer, steps


def fit_and_save(trainer: Trainer, model: Any, model_dir: Any) -> tuple[dict, float]:
    """Train, then save ``model`` (anything with ``save(dir)``) in eval mode to ``model_dir``: (the trainer's
    summary, the training's wall seconds)."""
    import time

    t0 = time.perf_counter()
    summary = trainer.fit()
    seconds = time.perf_counter() - t0
    model.eval()
    model.save(model_dir)
    return summary, seconds
