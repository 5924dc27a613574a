"""The :class:`~bertkit.train.Trainer`'s options, in five small groups.

Quick start::

    Trainer(model, opt, sched, train_batches=batches, out_dir="runs/x",
            schedule=Schedule(max_steps=10_000, grad_accum=2, eval_every=500, seed=0),
            numerics=Numerics(precision="bf16", clip_norm=1.0),
            reporting=Reporting(log_every=10, tensorboard=True),
            checkpointing=Checkpointing(checkpoint_every=500, keep_last=2),
            parallel=Parallel(strategy="fsdp"))

Each field may also be given to the Trainer as a keyword of its own (``max_steps=10_000``,
``precision="bf16"``, ``distributed="fsdp"`` for ``Parallel.strategy``), which sets that field of its group:
:func:`group_options`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Schedule:
    """What is run: ``max_steps`` optimizer steps of ``grad_accum`` micro-batches each, an evaluation every
    ``eval_every`` steps (0: only at the end) and ``seed`` (the model's random draws; rank r adds r)."""

    max_steps: int
    grad_accum: int = 1
    eval_every: int = 0
    seed: int = 0


@dataclass(frozen=True)
class Numerics:
    """How a step computes: ``precision`` ("fp32", "bf16", "fp16" on CUDA, "auto"), gradient clipping to
    ``clip_norm`` (None: none), and what a non-finite loss does: ``nonfinite`` "skip" (the step, up to
    ``max_nonfinite`` in a row) or "stop"."""

    precision: str = "fp32"
    clip_norm: float | None = 1.0
    nonfinite: str = "skip"
    max_nonfinite: int = 10

    def __post_init__(self) -> None:
        if self.nonfinite not in ("skip", "stop"):
            raise ValueError("nonfinite must be 'skip' or 'stop'")


@dataclass(frozen=True)
class Reporting:
    """What the run reports: a record every ``log_every`` steps (metrics.jsonl), a progress bar labelled
    ``desc`` (``progress``; rank 0 only), TensorBoard events (``tensorboard``) and curves.png (``plot``)."""

    log_every: int = 10
    progress: bool = True
    tensorboard: bool = False
    plot: bool = True
    desc: str = "train"


@dataclass(frozen=True)
class Checkpointing:
    """A checkpoint every ``checkpoint_every`` steps and at the end (0: none), the last ``keep_last`` kept."""

    checkpoint_every: int = 0
    keep_last: int = 2


@dataclass(frozen=True)
class Parallel:
    """Under ``torchrun``: ``strategy`` "ddp" or "fsdp" wraps the model (one process: no wrapper);
    ``find_unused_parameters`` is DDP's (a model whose loss leaves some parameters unused)."""

    strategy: str = "ddp"
    find_unused_parameters: bool = False


GROUPS: dict[str, type] = {
    "schedule": Schedule,
    "numerics": Numerics,
    "reporting": Reporting,
    "checkpointing": Checkpointing,
    "parallel": Parallel,
}

# a field given as a Trainer keyword of another name
ALIASES = {"distributed": ("parallel", "strategy")}

# keyword -> (group, field)
_FIELDS = {f.name: (g, f.name) for g, cls in GROUPS.items() for f in dataclasses.fields(cls)} | ALIASES


def group_options(groups: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The five groups: ``groups`` (group name -> instance or None) with each of ``fields`` (a field name,
    or an alias, -> value) set in its group. A group left None takes its defaults (``Schedule`` needs
    ``max_steps``). TypeError for a keyword that is no field, like an unexpected keyword argument."""
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        raise TypeError(f"Trainer() got an unexpected keyword argument {unknown[0]!r}")
    changes: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
    for key, value in fields.items():
        group, name = _FIELDS[key]
        changes[group][name] = value
    out = {}
    for name, cls in GROUPS.items():
        given = groups.get(name)
        if given is None:
            if name == "schedule" and "max_steps" not in changes[name]:
                raise TypeError("Trainer() needs schedule=Schedule(max_steps=...) or max_steps=...")
            out[name] = cls(**changes[name])
        else:
            if not isinstance(given, cls):
                raise TypeError(f"Trainer(): {name} must be a {cls.__name__}, got {type(given).__name__}")
            out[name] = dataclasses.replace(given, **changes[name])
    return out
