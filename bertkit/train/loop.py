"""A generic, resumable training loop (it knows nothing about BERT).

Quick start::

    from bertkit.train import Trainer, Batches, build_optimizer, linear_schedule
    from bertkit.train.options import Checkpointing, Numerics, Reporting, Schedule

    batches = Batches(dataset, batch_size=32, collate_fn=collate, seed=0)   # resumable, rank-aware
    opt = build_optimizer(model, "adamw", lr=1e-4, weight_decay=0.01)
    sched = linear_schedule(opt, warmup_steps=100, total_steps=10_000)
    trainer = Trainer(model, opt, sched, train_batches=batches, out_dir="runs/x",
                      schedule=Schedule(max_steps=10_000, grad_accum=1, eval_every=0, seed=0),
                      numerics=Numerics(precision="fp32", clip_norm=1.0),   # "bf16" (CPU/GPU), "fp16" (GPU)
                      reporting=Reporting(log_every=10),
                      checkpointing=Checkpointing(checkpoint_every=500, keep_last=2),
                      loss_fn=None,            # default: model(**batch).loss
                      eval_fn=None)
    summary = trainer.fit(resume=True)         # dict: steps, loss, last log record, last eval, distributed ("fsdp", "ddp", "none"), choices, ...

``loss_fn(model, batch) -> loss`` or ``(loss, metrics)``: ``model`` is the (possibly DDP-wrapped) model and
``batch`` the micro-batch already on the device. ``metrics`` maps a name to a scalar (averaged over the
log window) or to a ``(numerator, denominator)`` pair (summed over micro-batches, ranks and the window, then
divided: a correctly weighted accuracy). Metrics go into every log record.

``eval_fn(model) -> dict[str, float]`` runs every ``eval_every`` steps and at the end, under
``torch.no_grad()`` with the model in eval mode (the RNG state is restored afterwards, so evaluation
never changes the training stream). Results go to ``OUT/eval.jsonl`` and the summary.

``train_batches`` is either a :class:`Batches` (or any object with ``__iter__``/``__next__``,
``state_dict()`` and ``load_state_dict()``), restored exactly on resume, or a plain re-iterable whose first
``consumed`` micro-batches are skipped on resume (deterministic only if the iterable is).

Options come in five frozen groups (:mod:`bertkit.train.options`): ``Schedule``, ``Numerics``, ``Reporting``,
``Checkpointing`` and ``Parallel``; any of their fields may also be passed as a keyword of its own.

Files under ``out_dir``: ``metrics.jsonl`` (one JSON object per logged step: ``step``, ``loss``, every
metric, ``lr``, ``grad_norm``, ``tokens_per_s``, ``elapsed_s``), ``eval.jsonl``, ``checkpoints/step-N.pt``
(atomic; last ``keep_last`` kept; model, optimizer, scheduler, scaler, every RNG state, data position,
log-window accumulators), ``curves.png`` at the end, and TensorBoard events under ``tb/`` if
``tensorboard=True`` and the package is installed.

Resume: ``fit(resume=True)`` loads the newest checkpoint, truncates ``metrics.jsonl``/``eval.jsonl`` to the
checkpointed step, and continues; on CPU with the same seed the losses are bitwise those of an
uninterrupted run (the test kills a run with SIGKILL).

Stop: while ``fit`` runs with checkpoints on, SIGTERM or SIGINT lets the step in progress finish, writes its
checkpoint (every rank stops after the same step) and raises :class:`~bertkit.train.stop.TrainingStopped`, a
``KeyboardInterrupt`` that says where the checkpoint is; a second signal acts as it would without the trainer.

Non-finite loss: with ``Numerics(nonfinite="skip")`` (default) a step whose loss or gradient norm is not finite is
skipped (no optimizer update; counted in ``nonfinite_steps``); after ``max_nonfinite`` consecutive ones,
or at the first one with ``nonfinite="stop"``, :class:`NonFiniteLossError` explains what to try. The
model is checked to be finite before every checkpoint, so a NaN never reaches one.

Distributed (:mod:`bertkit.train.distributed`): if ``torch.distributed`` is initialised with more than one
process (``torchrun``), the model is wrapped in DDP (``Parallel(strategy="ddp")``, default) or FSDP
(``strategy="fsdp"``; pass the optimizer and scheduler as factories ``lambda model: ...`` / ``lambda opt: ...`` so they see the sharded parameters).
Gradients are averaged over ranks; :class:`Batches` gives rank ``r`` its own part of every global batch
(global batch = ``batch_size * world_size * grad_accum``), laid out so that N processes equal one process
with ``grad_accum = N``. Only rank 0 writes files; RNG states of every rank are checkpointed.

Precision (:mod:`bertkit.train.precision`): autocast and, for fp16 on CUDA, a gradient scaler. The log window
(:mod:`bertkit.train.window`) sums losses and metrics between log records.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from bertkit.errors import UserError
from bertkit.kernels import attention, gemm
from bertkit.kernels.freed_memory import keep_freed_memory
from bertkit.train.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from bertkit.train.distributed import (
    all_ranks_ok,
    dist_info,
    full_model_state,
    full_optim_state,
    load_full_state,
    wrap_model,
)
from bertkit.train.logs import plot_curves, truncate_jsonl
from bertkit.train.options import Checkpointing, Numerics, Parallel, Reporting, Schedule, group_options
from bertkit.train.precision import (
    autocast,
    check_precision,
    choose_precision,
    make_scaler,
    resume_precision,
)
from bertkit.train.stop import StopSignals, TrainingStopped
from bertkit.train.window import LogWindow

logger = logging.getLogger("bertkit")

__all__ = [
    "CheckpointsExistError",
    "NonFiniteLossError",
    "Trainer",
    "default_loss_fn",
    "default_tokens_fn",
    "to_device",
]


class CheckpointsExistError(UserError, FileExistsError):
    """``fit(resume=False)`` into a directory that holds an earlier run's checkpoints (a user error: the CLI
    prints it; still a ``FileExistsError`` for code that catches that)."""


class NonFiniteLossError(RuntimeError):
    """Training produced NaN/inf losses; the message says at which step and what to try."""


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------


def to_device(batch, device: torch.device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def default_loss_fn(model, batch):
    out = model(**batch) if isinstance(batch, dict) else model(*batch)
    return out.loss if hasattr(out, "loss") else out["loss"]


def default_tokens_fn(batch) -> int:
    if isinstance(batch, dict):
        if "attention_mask" in batch:
            return int(batch["attention_mask"].sum())
        if "input_ids" in batch:
            return batch["input_ids"].numel()
    return 0


def _scalar(v) -> float:
    return float(v.detach().float().item()) if isinstance(v, torch.Tensor) else float(v)


# ----------------------------------------------------------------------------------------------------------
# Trainer
# ----------------------------------------------------------------------------------------------------------


class Trainer:
    """See the module docstring. All arguments after ``scheduler`` are keyword-only."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | Callable[[nn.Module], torch.optim.Optimizer],
        scheduler=None,
        *,
        train_batches,
        out_dir: str | os.PathLike,
        schedule: Schedule | None = None,
        numerics: Numerics | None = None,
        reporting: Reporting | None = None,
        checkpointing: Checkpointing | None = None,
        parallel: Parallel | None = None,
        device: str | torch.device | None = None,
        loss_fn: Callable | None = None,
        eval_fn: Callable[[nn.Module], dict] | None = None,
        tokens_fn: Callable[[Any], int] | None = None,
        callbacks: Iterable[Callable[[dict], None]] = (),
        **fields: Any,
    ):
        """``fields``: any field of the five groups as a keyword of its own (``max_steps=...``,
        ``precision=...``; :mod:`bertkit.train.options`), which sets it in its group."""
        groups = dict(schedule=schedule, numerics=numerics, reporting=reporting)
        opts = group_options(groups | dict(checkpointing=checkpointing, parallel=parallel), fields)
        self.schedule: Schedule = opts["schedule"]
        self.numerics: Numerics = opts["numerics"]
        self.reporting: Reporting = opts["reporting"]
        self.checkpointing: Checkpointing = opts["checkpointing"]
        self.parallel: Parallel = opts["parallel"]
        self.rank, self.world_size = dist_info()
        if device is None:
            device = (
                torch.device("cuda", torch.cuda.current_device())
                if torch.cuda.is_available()
                else torch.device("cpu")
            )
        self.device = torch.device(device)
        check_precision(self.numerics.precision, self.device)
        self.model = model.to(self.device)
        self.wrapped, self._fsdp = wrap_model(
            model, self.parallel.strategy, self.world_size, self.device, self.parallel.find_unused_parameters
        )
        # the wrapper in use: "fsdp", "ddp", or "none" (one process)
        self.distributed = "fsdp" if self._fsdp else ("none" if self.wrapped is model else "ddp")
        self.optimizer = (
            optimizer(self.wrapped)
            if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer)
            else optimizer
        )
        self.scheduler = (
            scheduler(self.optimizer)
            if callable(scheduler) and not hasattr(scheduler, "state_dict")
            else scheduler
        )
        self.train_batches = train_batches
        self.out_dir = Path(out_dir)
        self.max_steps = int(self.schedule.max_steps)
        self.loss_fn = loss_fn or default_loss_fn
        self.grad_accum = int(self.schedule.grad_accum)
        # "auto" is resolved at the first batch (or from a resumed checkpoint): the one option that changes
        self.precision = self.numerics.precision
        self.log_every = max(int(self.reporting.log_every), 1)
        self.checkpoint_every = int(self.checkpointing.checkpoint_every or 0)
        self.eval_fn = eval_fn
        self.eval_every = int(self.schedule.eval_every or 0)
        self.seed = int(self.schedule.seed)
        self.tokens_fn = tokens_fn or default_tokens_fn
        self.progress = self.reporting.progress and self.rank == 0
        self.callbacks = list(callbacks)
        self.scaler = make_scaler(self.precision, self.device)
        self.step = 0
        self._drawn = 0  # micro-batches taken from train_batches
        self.nonfinite_steps = 0
        self._consecutive_bad = 0
        self._window = LogWindow()
        self.last_record: dict | None = None
        self.last_eval: dict | None = None
        self._tb = None
        self.is_main = self.rank == 0

    def choices(self) -> dict[str, str | None]:
        """The per-machine choices this run computes with: the fp32 GEMM backend (None while no fp32 GEMM
        has run), the precision ("auto" until the first batch resolves it) and how bf16 attention runs (None
        while none has run)."""
        return {"linear": gemm.backend_chosen(), "precision": self.precision,
                "bf16_attention": attention.bf16_attention_chosen()}  # fmt: skip

    def _autocast(self):
        return autocast(self.precision, self.device)

    # -- state -------------------------------------------------------------------------------------------
    def full_model_state(self) -> dict:
        """The unsharded model state dict (a collective under FSDP: every rank must call it)."""
        return full_model_state(self.model, self._fsdp)

    def state_dict(self) -> dict:
        rngs: list = [rng_state()]
        if self.world_size > 1:  # every rank's
            gathered: list = [None] * self.world_size
            dist.all_gather_object(gathered, rngs[0])
            rngs = gathered
        data_state = self.train_batches.state_dict() if hasattr(self.train_batches, "state_dict") else None
        return {
            "step": self.step,
            "model": self.full_model_state(),
            "optimizer": full_optim_state(self.model, self.optimizer, self._fsdp),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": rngs,
            "data": data_state,
            "consumed": self._drawn,
            "window": self._window.state(),
            "nonfinite_steps": self.nonfinite_steps,
            "world_size": self.world_size,
            "seed": self.seed,
            # the per-machine choices this run computed with (they round differently): a resume takes them
            "choices": {
                "linear": gemm.backend_name(),
                "precision": self.precision,
                "bf16_attention": attention.bf16_attention_chosen(),
            },
        }

    def load_state_dict(self, state: dict, data: bool = True) -> None:
        """Restore a :meth:`state_dict`; ``data=False`` keeps the batch source where it is (a new phase)."""
        try:
            load_full_state(self.model, self.optimizer, state, self._fsdp)
        except (RuntimeError, KeyError, ValueError) as e:  # e.g. "size mismatch for ..." from another model
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            raise UserError(
                f"the checkpoint in {self.out_dir / 'checkpoints'} does not fit this run's model or optimizer "
                f"({first}); resume with the settings it was written with, or start a new --out"
            ) from None
        choices = state.get("choices") or {"linear": state.get("gemm")}  # "gemm": an older checkpoint
        gemm.resume_backend(choices.get("linear"))
        attention.resume_bf16_attention(choices.get("bf16_attention"))
        if self.precision == "auto":
            self.precision = resume_precision(choices.get("precision")) or "auto"
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        rngs = state["rng"]
        set_rng_state(rngs[self.rank] if self.rank < len(rngs) else rngs[0])
        if data and hasattr(self.train_batches, "load_state_dict") and state.get("data") is not None:
            self.train_batches.load_state_dict(state["data"])
        elif data:
            it = iter(self.train_batches)
            for _ in range(state["consumed"]):
                next(it)
            self._drawn = int(state["consumed"])
            self.train_batches = it
        self.step = int(state["step"])
        self.nonfinite_steps = int(state.get("nonfinite_steps", 0))
        self._window = LogWindow(state.get("window") if data else None)

    def _model_is_finite(self) -> bool:
        ok = all(  # an FSDP shard checks its own part
            bool(torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all())
            for p in self.model.parameters()
        )
        return all_ranks_ok(ok, self.world_size, self.device)

    def save(self) -> Path | None:
        """Write a checkpoint of the current step (rank 0 writes; every rank must call it)."""
        if not self._model_is_finite():
            raise NonFiniteLossError(
                f"model parameters became non-finite by step {self.step}; refusing to checkpoint them. "
                "Resume from the last checkpoint with a lower --lr, a longer --warmup, or --precision fp32."
            )
        state = self.state_dict()
        path = None
        if self.is_main:
            path = save_checkpoint(self.out_dir, self.step, state, keep_last=self.checkpointing.keep_last)
        if self.world_size > 1:
            dist.barrier()
        return path

    # -- logging -------------------------------------------------------------------------------------------
    def _flush_window(self, lr: float, grad_norm: float) -> dict:
        extra: dict[str, Any] = {"lr": lr, "grad_norm": grad_norm}
        rec = self._window.flush(self.step, extra, self.world_size, self.device)
        rec["elapsed_s"] = round(time.perf_counter() - self._t0, 3)
        if self.nonfinite_steps:
            rec["nonfinite_steps"] = self.nonfinite_steps
        return rec

    def _write(self, name: str, rec: dict) -> None:
        if not self.is_main:
            return
        with open(self.out_dir / name, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    def _tb_log(self, prefix: str, rec: dict) -> None:
        if self._tb is None:
            return
        for k, v in rec.items():
            if k != "step" and isinstance(v, (int, float)) and v is not None and math.isfinite(v):
                self._tb.add_scalar(f"{prefix}/{k}", v, rec["step"])

    # -- evaluation ----------------------------------------------------------------------------------------
    def evaluate(self) -> dict | None:
        if self.eval_fn is None:
            return None
        saved = rng_state()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), self._autocast():
                res = self.eval_fn(self.model)
        finally:
            self.model.train(was_training)
            set_rng_state(saved)
        rec = {"step": self.step, **{k: _scalar(v) for k, v in (res or {}).items()}}
        if self._window.empty:  # evaluation time is not training time: the open window starts now
            self._window.start_clock()
        self.last_eval = rec
        self._write("eval.jsonl", rec)
        self._tb_log("eval", rec)
        return rec

    # -- the loop ------------------------------------------------------------------------------------------
    def fit(self, resume: bool = False) -> dict:
        """Train until ``max_steps``; with ``resume`` continue from the newest checkpoint in ``out_dir``."""
        # every step frees and re-allocates the same large blocks: keep them in the process rather than
        # fault them in afresh each step (bertkit.kernels.freed_memory; off by bertkit.settings)
        keep_freed_memory()
        resumed_from = self._begin(resume)
        if self.reporting.tensorboard and self.is_main:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.out_dir / "tb"))
            except Exception:  # noqa: BLE001 - optional
                logger.info("tensorboard is not installed; skipping TensorBoard logging")
        self._t0 = time.perf_counter()
        first_step = self.step
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=self.max_steps,
                initial=self.step,
                desc=self.reporting.desc,
                unit="step",
                dynamic_ncols=True,
            )
        data = iter(self.train_batches) if not hasattr(self.train_batches, "__next__") else self.train_batches
        self.wrapped.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        stopped = None
        signalled = None
        self._window.start_clock()  # set-up and loading are not training time
        # SIGTERM / SIGINT: finish the step, checkpoint it, stop (bertkit.train.stop); only a run that
        # checkpoints can be resumed, so only such a run catches them
        signals = StopSignals(enabled=self.checkpoint_every > 0)
        try:
            with signals:
                while self.step < self.max_steps:
                    drawn = self._forward_backward(data)
                    if drawn is None:
                        stopped = "data exhausted"
                        break
                    self._update(drawn, params, bar)
                    signalled = self._agreed_stop(signals)
                    if signalled is not None:
                        break
        finally:
            if bar is not None:
                bar.close()
        if signalled is not None:
            if self.step % self.checkpoint_every:  # else this step's periodic checkpoint is written already
                self.save()
            if self._tb is not None:
                self._tb.close()
            checkpoint = dict(list_checkpoints(self.out_dir)).get(self.step) if self.is_main else None
            raise TrainingStopped(signalled, self.step, checkpoint)
        trained = self.step > first_step
        if (
            trained
            and self.eval_fn is not None
            and (self.last_eval is None or self.last_eval["step"] != self.step)
        ):
            self.evaluate()
        if trained and self.checkpoint_every and (self.step % self.checkpoint_every != 0 or stopped):
            self.save()
        if self._tb is not None:
            self._tb.close()
        png = None
        if self.reporting.plot and self.is_main:
            try:
                png = plot_curves(
                    self.out_dir / "metrics.jsonl", self.out_dir / "eval.jsonl", self.out_dir / "curves.png"
                )
            except Exception as e:  # noqa: BLE001 - a plot must never fail a run
                logger.warning("could not plot curves: %s", e)
        return {
            "steps": self.step,
            "loss": self.last_record["loss"] if self.last_record else None,
            "last": self.last_record,
            "eval": self.last_eval,
            "nonfinite_steps": self.nonfinite_steps,
            "resumed_from": resumed_from,
            "stopped": stopped,
            "distributed": self.distributed,
            "choices": self.choices(),
            "elapsed_s": round(time.perf_counter() - self._t0, 3),
            "curves_png": str(png) if png else None,
            "out_dir": str(self.out_dir),
        }

    def _update(self, drawn: tuple[float, dict, dict, int], params: list[torch.Tensor], bar: Any) -> None:
        """One optimizer step from the gradients :meth:`_forward_backward` left (``drawn``: its summary),
        then this step's log record, evaluation and checkpoint as they fall due."""
        step_loss, metrics_step, pairs_step, tokens = drawn
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = self._clip(params)
        finite = all_ranks_ok(
            math.isfinite(step_loss) and math.isfinite(grad_norm), self.world_size, self.device
        )
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler is not None:
            # The scaler skips the update itself when the unscaled gradients hold inf/NaN, and lowers
            # its scale; it must see every step (or its next unscale_ refuses to run).
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif finite:
            self.optimizer.step()
        if finite or (self.scaler is not None and math.isfinite(step_loss)):
            self._consecutive_bad = 0  # (a gradient overflow under fp16 is the scaler's business)
        else:
            self._bad_step(step_loss, grad_norm, lr)
        if self.scheduler is not None:
            with warnings.catch_warnings():  # a skipped step must not shift the schedule
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
                self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        if finite:
            mets_avg: dict = {k: v[0] / max(v[1], 1) for k, v in metrics_step.items()}
            mets_avg.update(pairs_step)
            self._window.add(step_loss, mets_avg, tokens)
        if self.step % self.log_every == 0 or self.step == self.max_steps:
            rec = self._flush_window(lr, grad_norm)
            self.last_record = rec
            self._write("metrics.jsonl", rec)
            self._tb_log("train", rec)
            for cb in self.callbacks:
                cb(rec)
            if bar is not None:
                post = {"loss": f"{rec['loss']:.4f}"}
                if rec.get("tokens_per_s"):
                    post["tok/s"] = f"{rec['tokens_per_s']:.0f}"
                bar.set_postfix(post, refresh=False)
        if bar is not None:
            bar.update(1)
        if self.eval_every and self.step % self.eval_every == 0 and self.step != self.max_steps:
            self.evaluate()
        if self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self.save()

    def _agreed_stop(self, signals: StopSignals) -> int | None:
        """The stop signal every rank acts on after this step, or None. One all-reduce, so a request that
        reached one rank stops all after the same step; one in the last step lets the run finish, which is
        all a resume would do."""
        if not signals.enabled or self.step >= self.max_steps:
            return None
        if all_ranks_ok(signals.requested is None, self.world_size, self.device):
            return None
        return signals.requested or signal.SIGTERM

    def _begin(self, resume: bool) -> str | None:
        """Restore the newest checkpoint (``resume``) or start afresh; returns the checkpoint resumed from."""
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        resumed_from = None
        if resume:
            found = latest_checkpoint(self.out_dir)
            if found is not None:
                path, state = found
                self.load_state_dict(state)
                resumed_from = str(path)
                if self.is_main:
                    truncate_jsonl(self.out_dir / "metrics.jsonl", self.step)
                    truncate_jsonl(self.out_dir / "eval.jsonl", self.step)
                logger.info("resumed from %s at step %d", path, self.step)
        if resumed_from is None:
            if self.checkpoint_every and list_checkpoints(self.out_dir):
                raise CheckpointsExistError(
                    f"{self.out_dir} holds checkpoints of an earlier run; resume it (--resume) or choose a new "
                    "output directory"
                )
            torch.manual_seed(self.seed + self.rank)
            if self.is_main:
                for name in ("metrics.jsonl", "eval.jsonl"):
                    with contextlib.suppress(FileNotFoundError):
                        (self.out_dir / name).unlink()
        return resumed_from

    def _forward_backward(self, data) -> tuple[float, dict, dict, int] | None:
        """Forward and backward over ``grad_accum`` micro-batches (gradients of their mean loss; DDP syncs only
        on the last). Returns (mean loss, scalar metrics as (sum, count), pair metrics, tokens), or None when the
        data ran out part-way (no update then)."""
        loss_sum = 0.0
        metrics_step: dict = {}
        pairs_step: dict = {}
        tokens = 0
        for m in range(self.grad_accum):
            try:
                batch = next(data)
                self._drawn += 1
            except StopIteration:
                return None
            tokens += self.tokens_fn(batch)
            batch = to_device(batch, self.device)
            if self.precision == "auto":  # measured on the first batch (bertkit.train.precision)
                self.precision = choose_precision(self.model, batch, self.loss_fn, self.device)
            sync = m == self.grad_accum - 1 or not hasattr(self.wrapped, "no_sync")
            ctx = contextlib.nullcontext() if sync else self.wrapped.no_sync()
            with ctx:
                with self._autocast():
                    out = self.loss_fn(self.wrapped, batch)
                loss, mets = out if isinstance(out, tuple) else (out, {})
                scaled = loss / self.grad_accum
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            loss_sum += float(loss.detach().float())
            for k, v in mets.items():
                if isinstance(v, tuple):
                    a, b = pairs_step.get(k, (0.0, 0.0))
                    pairs_step[k] = (a + _scalar(v[0]), b + _scalar(v[1]))
                else:
                    a, b = metrics_step.get(k, (0.0, 0))
                    metrics_step[k] = (a + _scalar(v), b + 1)
        return loss_sum / self.grad_accum, metrics_step, pairs_step, tokens

    def _clip(self, params: list[torch.Tensor]) -> float:
        max_norm = self.numerics.clip_norm if self.numerics.clip_norm else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor
            norm = norm.full_tensor()
        return float(norm)

    def _bad_step(self, loss: float, grad_norm: float, lr: float) -> None:
        self.nonfinite_steps += 1
        self._consecutive_bad += 1
        what = f"loss={loss} grad_norm={grad_norm}"
        msg = (
            f"non-finite training step {self.step + 1} ({what}, lr={lr:.3g}, precision={self.precision}). "
            "Try a lower --lr, a longer --warmup, --precision fp32 (or bf16 instead of fp16), and check the data "
            f"for empty or corrupt batches; resume from the last checkpoint under {self.out_dir / 'checkpoints'}."
        )
        if self.numerics.nonfinite == "stop" or self._consecutive_bad > self.numerics.max_nonfinite:
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(
                msg
                if self.numerics.nonfinite == "stop"
                else f"{self._consecutive_bad} consecutive non-finite steps; " + msg
            )
        logger.warning("skipping " + msg)
