"""Generic training: optimisers and schedules (optim), the resumable loop (loop) and its option groups
(options), checkpoints (checkpoint)."""

from bertkit.train.batches import Batches, LengthGroupedBatches
from bertkit.train.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from bertkit.train.logs import plot_curves, read_jsonl
from bertkit.train.loop import CheckpointsExistError, NonFiniteLossError, Trainer, to_device
from bertkit.train.optim import (
    Lamb,
    LinearWarmupDecay,
    build_optimizer,
    linear_schedule,
    param_groups,
    warmup_steps_from,
    warmup_steps_of_ratio,
)
from bertkit.train.options import Checkpointing, Numerics, Parallel, Reporting, Schedule
from bertkit.train.stop import StopSignals, TrainingStopped

__all__ = [
    "Batches",
    "Checkpointing",
    "CheckpointsExistError",
    "Lamb",
    "LengthGroupedBatches",
    "LinearWarmupDecay",
    "NonFiniteLossError",
    "Numerics",
    "Parallel",
    "Reporting",
    "Schedule",
    "StopSignals",
    "Trainer",
    "TrainingStopped",
    "build_optimizer",
    "latest_checkpoint",
    "linear_schedule",
    "list_checkpoints",
    "load_checkpoint",
    "param_groups",
    "plot_curves",
    "read_jsonl",
    "save_checkpoint",
    "to_device",
    "warmup_steps_from",
    "warmup_steps_of_ratio",
]
