"""Stopping a training run cleanly on SIGTERM or SIGINT.

A spot machine that is reclaimed, a batch scheduler at its time limit, ``torchrun`` shutting its workers down
and a user's Ctrl-C all ask a run to stop. Without help the run dies wherever it is and loses every step since
its last periodic checkpoint. While :class:`StopSignals` is active the first SIGTERM or SIGINT only records
the request: the trainer finishes the step in progress, writes a checkpoint of it and raises
:class:`TrainingStopped`. The signal's earlier handler is put back at once, so a second signal acts as it
always did (Ctrl-C twice stops at once).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingStopped(KeyboardInterrupt):
    """A run stopped by a signal after checkpointing the step it had finished (``step``, ``checkpoint``).

    A ``KeyboardInterrupt``: code that stops on Ctrl-C stops on it too, and an ``except Exception`` around
    one job of many does not swallow it and start the next. ``exit_status`` is the shell's for the signal
    (143 for SIGTERM, 130 for SIGINT)."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None) -> None:
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_status = 128 + signum
        where = f"its checkpoint is {checkpoint}" if checkpoint else "rank 0 wrote its checkpoint"
        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step}; {where}")


class StopSignals:
    """A context in which SIGTERM and SIGINT ask for a stop (:attr:`requested`) instead of ending the process.

    Handlers can only be set in the main thread: elsewhere, or when ``enabled`` is false (a run without
    checkpoints has nothing to resume from), it changes nothing and :attr:`requested` stays None."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requested: int | None = None  # the first stop signal received
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if self.enabled and threading.current_thread() is threading.main_thread():
            # None: a handler set outside Python (an embedding program's); the default is what it can get back
            previous = {s: signal.signal(s, self._receive) for s in STOP_SIGNALS}
            self._previous = {s: signal.SIG_DFL if h is None else h for s, h in previous.items()}
        return self

    def _receive(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is None:
            self.requested = signum
        signal.signal(signum, self._previous.pop(signum))  # a second one acts as before

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
