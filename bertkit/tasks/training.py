"""Fine-tuning a model on encoded features with the generic :class:`bertkit.train.Trainer`.

:func:`train` is the one entry every task uses (GLUE, classify, NER, SWAG, SQuAD): AdamW (weight decay 0.01,
none on LayerNorm/bias), linear warm-up over ``warmup_ratio`` of the steps then linear decay, gradient
clipping, batches of similar lengths (:class:`bertkit.train.LengthGroupedBatches`). At scale: gradient
accumulation (``grad_accum`` micro-batches per optimizer step), DDP under ``torchrun`` (each rank takes its
own batches of every step, so N processes equal one process with ``grad_accum = N``) or FSDP2 (``distributed``
"fsdp": parameters, gradients and optimizer state sharded over the ranks), bf16 autocast, fp16 with
a gradient scaler on CUDA, a step budget (``max_steps``), evaluation every ``eval_every`` steps and the best
evaluated weights kept (``keep_best``: they end up in the model, and under ``OUT/best/``).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from bertkit.errors import UserError
from bertkit.io import atomic_write, atomic_write_json
from bertkit.tasks.spec import Settings
from bertkit.train import (
    LengthGroupedBatches,
    Trainer,
    build_optimizer,
    linear_schedule,
    read_jsonl,
    warmup_steps_of_ratio,
)
from bertkit.train.distributed import dist_info, full_model_state
from bertkit.train.options import Checkpointing, Numerics, Parallel, Reporting, Schedule

BEST_DIR = "best"
logger = logging.getLogger("bertkit")


class BestKeeper:
    """Keeps the weights of the best evaluation so far under ``DIR/best`` (``model.safetensors`` and
    ``best.json`` with the step, metric and score; higher is better). Only rank 0 writes; every rank can
    :meth:`restore` them afterwards. A resumed run continues from the saved best."""

    def __init__(
        self,
        out_dir: Path,
        metric: str,
        resume: bool,
        is_main: bool,
        state_fn: Callable[[nn.Module], dict] | None = None,
    ):
        """``state_fn(model)``: the model's full state dict (default ``model.state_dict()``); under FSDP the
        Trainer's gathering one, a collective that every rank calls through :meth:`update`."""
        self.dir = out_dir / BEST_DIR
        self.metric = metric
        self.is_main = is_main
        self.state_fn = state_fn or (lambda m: m.state_dict())
        self.best = read_best(out_dir) if resume else None
        if self.best is None and is_main and self.dir.exists():
            shutil.rmtree(self.dir)  # an earlier, unrelated run's best must not win

    def update(self, model: nn.Module, step: int, scores: dict) -> bool:
        """Record ``scores`` of ``model`` at ``step``; True when they are the best so far (weights saved)."""
        score = scores.get(self.metric)
        if score is None or not math.isfinite(score):
            return False
        if self.best is not None and score <= self.best["score"]:
            return False
        self.best = {"step": step, "metric": self.metric, "score": score}
        full = self.state_fn(model)
        if self.is_main:
            from safetensors.torch import save

            self.dir.mkdir(parents=True, exist_ok=True)
            state = {k: v.detach().cpu().contiguous() for k, v in full.items()}
            with atomic_write(self.dir / "model.safetensors", "wb") as f:
                f.write(save(state))
            atomic_write_json(self.dir / "best.json", self.best)
        return True

    def restore(self, model: nn.Module) -> dict | None:
        """Load the best weights into ``model`` (in place); returns best.json's record (None: nothing kept)."""
        if self.best is None:
            return None
        from safetensors.torch import load_file

        state = load_file(self.dir / "model.safetensors", device=str(next(model.parameters()).device))
        model.load_state_dict(state)
        return self.best


def read_best(run_dir: Path) -> dict | None:
    """The kept best evaluation of a run (``best/best.json``), if any."""
    if not (run_dir / BEST_DIR / "best.json").is_file():
        return None
    return json.loads((run_dir / BEST_DIR / "best.json").read_text(encoding="utf-8"))


def train(
    model: nn.Module,
    feats: Sequence,
    collate_fn: Callable[[list], dict],
    s: Settings,
    out_dir: str | Path,
    *,
    lengths: Sequence[int] | None = None,
    desc: str = "train",
    callbacks: Iterable[Callable[[dict], None]] = (),
    eval_fn: Callable[[nn.Module], dict] | None = None,
    main_metric: str | None = None,
) -> list[float]:
    """Fine-tune ``model`` in place on ``feats`` with :class:`bertkit.train.Trainer`; returns every step's loss.

    ``collate_fn(list of feats) -> batch dict`` whose ``model(**batch).loss`` is trained; ``lengths`` (default
    ``len(f)``) groups batches by length. ``s.max_steps`` if set, else ``s.epochs`` (may be fractional), sets
    the number of optimizer steps; each takes ``s.grad_accum`` batches of ``s.batch_size`` on every process.
    The Trainer's files (``metrics.jsonl``, ``eval.jsonl``, ``curves.png``, ``checkpoints/`` with
    ``s.checkpoint_every``) go to ``out_dir``; with ``s.resume`` training continues from its newest checkpoint,
    and the returned losses include the steps before it (read back from ``metrics.jsonl``). ``callbacks`` get
    each step's log record. ``eval_fn(model) -> {metric: score}`` runs every ``s.eval_every`` steps and at the
    end; with ``s.keep_best`` the weights best on ``main_metric`` are kept and loaded back at the end.
    With ``s.freeze_encoder`` the encoder (``model.bert``, or ``model.model`` for ModernBERT: the attribute
    ``model.base_model_prefix`` names) is frozen and only the rest (the head) is trained.
    The caller's global RNG state is left as it was (dropout draws from a fork seeded with ``s.seed``).
    With ``s.distributed`` "fsdp" under ``torchrun`` a copy of ``model`` is sharded and trained, and its
    gathered weights are loaded back into ``model`` at the end, so every rank returns a plain model.
    """
    out_dir = Path(out_dir)
    rank, world = dist_info()
    if (s.eval_every or s.keep_best) and eval_fn is None:
        raise UserError("--eval-every/--keep-best: this task has no evaluation during training")
    if s.keep_best and not s.eval_every:
        raise UserError("--keep-best needs --eval-every N (how often to evaluate on dev)")
    body = getattr(model, model.base_model_prefix)  # the encoder under the task head
    if s.freeze_encoder:
        for p in body.parameters():
            p.requires_grad_(False)
    if s.gradient_checkpointing:
        body.gradient_checkpointing_enable()
    fsdp = _fsdp(s.distributed, world)
    # FSDP shards a module in place and cannot undo it: a copy is sharded, and `model` stays the plain one
    # the callers evaluate, predict with and save
    trained = copy.deepcopy(model) if fsdp else model
    batches = LengthGroupedBatches(
        feats, s.batch_size, collate_fn, lengths=lengths, seed=s.seed,
        rank=rank, world_size=world, grad_accum=s.grad_accum,
    )  # fmt: skip
    total = s.max_steps or max(1, math.ceil(batches.steps_per_epoch() * s.epochs))
    lr_by_prefix = {"crf.": s.crf_lr} if getattr(model, "crf", None) is not None else None
    warmup = warmup_steps_of_ratio(s.warmup_ratio, total)
    encoder = getattr(trained, trained.base_model_prefix) if s.freeze_encoder else None

    def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
        # `m` may be the DDP wrapper: reach the encoder through `trained`. The Trainer sets the whole model to
        # train mode; frozen features must not get dropout.
        if encoder is not None:
            encoder.eval()
        return m(**batch).loss

    keeper = None
    if s.keep_best:
        keeper = BestKeeper(
            out_dir, main_metric or "", s.resume, rank == 0, state_fn=lambda m: trainer.full_model_state()
        )
    trainer_eval = None
    if eval_fn is not None and s.eval_every:

        def trainer_eval(m: nn.Module) -> dict:
            scores = {k: float(v) for k, v in eval_fn(m).items() if isinstance(v, (int, float))}
            if world > 1:  # rank 0's scores decide for all, so every rank takes part in the same gathers
                shared = [scores]
                dist.broadcast_object_list(shared, src=0)
                scores = shared[0]
            if keeper is not None:
                scores["is_best"] = float(keeper.update(m, trainer.step, scores))
            return scores

    # factories: under FSDP the optimizer must see the sharded parameters, made as the Trainer wraps `trained`
    trainer = Trainer(
        trained,
        lambda _: build_optimizer(trained, lr=s.lr, weight_decay=s.weight_decay, lr_by_prefix=lr_by_prefix),
        lambda opt: linear_schedule(opt, warmup, total),
        train_batches=batches, out_dir=out_dir,
        schedule=Schedule(max_steps=total, grad_accum=s.grad_accum, eval_every=s.eval_every, seed=s.seed),
        numerics=Numerics(precision=s.precision, clip_norm=s.max_grad_norm or None),
        reporting=Reporting(log_every=1, progress=s.progress, desc=desc),
        checkpointing=Checkpointing(checkpoint_every=s.checkpoint_every),
        parallel=Parallel(strategy="fsdp" if fsdp else "ddp"),
        loss_fn=loss_fn, eval_fn=trainer_eval, callbacks=callbacks,
    )  # fmt: skip
    devices = [trainer.device] if trainer.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        trainer.fit(resume=s.resume)
    if fsdp:  # the gathered weights (a collective), back into the plain model on every rank
        model.load_state_dict(full_model_state(trainer.model, fsdp=True, every_rank=True))
        model.to(trainer.device)
        del trainer, trained
    if world > 1:
        dist.barrier()  # rank 0's files (metrics.jsonl, best/) are complete before anyone reads them
    if keeper is not None:
        keeper.restore(model)
    model.eval()
    return [r["loss"] for r in read_jsonl(out_dir / "metrics.jsonl")]


def _fsdp(distributed: str, world: int) -> bool:
    """Whether to shard with FSDP: ``distributed`` "fsdp" with more than one process. One process has nothing
    to shard: it trains unwrapped, as with DDP, and says so in one line."""
    if distributed not in ("ddp", "fsdp"):
        raise UserError(f"--distributed {distributed}: use ddp or fsdp")
    if distributed == "fsdp" and world == 1:
        logger.warning("--distributed fsdp: one process, nothing to shard; it trains unwrapped")
    return distributed == "fsdp" and world > 1
