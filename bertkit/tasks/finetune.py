"""The shared fine-tuning driver: encode, batch, train, evaluate, write results.

A task is a ``TaskData`` (kind ``seq`` / ``token`` / ``choice``, train and dev examples, label list, metric);
``finetune(task, model_dir, out_dir, settings)`` then

1. tokenizes (:mod:`bertkit.tasks.encoding`: pairs as ``[CLS] a [SEP] b [SEP]`` truncated longest-first;
   for tagging, each word's pieces with the word's label on its first sub-token and -100 on the rest, long
   sentences split into windows),
2. trains with the generic :class:`bertkit.train.Trainer` (:func:`bertkit.tasks.training.train`): AdamW
   (weight decay 0.01, none on LayerNorm/bias), linear warm-up over ``warmup_ratio`` of the steps then
   linear decay, gradient clipping 1.0, batches of similar lengths (:class:`bertkit.train.LengthGroupedBatches`,
   padded to the longest member) so little time goes on padding; optional checkpoints, resume, bf16/fp16,
   gradient accumulation, DDP under ``torchrun``, evaluation every N steps with the best weights kept,
3. evaluates on dev (:mod:`bertkit.tasks.evaluation`), and writes (:mod:`bertkit.tasks.outputs`)
   ``OUT/metrics.json`` ``{"task", "split": "dev", "metrics", "examples"}``,
   ``OUT/model`` (HF layout + tokenizer files), ``OUT/predictions.jsonl``, ``OUT/loss.png``,
   ``OUT/train_log.json``, and the Trainer's ``OUT/metrics.jsonl`` (one record per step), ``OUT/curves.png``
   and, with ``checkpoint_every``, ``OUT/checkpoints/``.

``search=True`` runs the paper's grid (batch {16, 32} x lr {5e-5, 3e-5, 2e-5} x epochs {2, 3, 4}) and
``restarts=N`` N seeds; the run best on dev is kept (its model is the one saved). With more than one run,
each run's Trainer files go to its own ``OUT/runs/NN-b…-lr…-e…-s…/`` so checkpoints never mix.

The same seed gives the same losses; a run resumed from a checkpoint (``resume=True``) continues exactly
as if it had not been interrupted (on CPU, bitwise). Under ``torchrun`` every rank trains its part of each
step and evaluates; rank 0 alone writes the outputs.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import nn

from bertkit.architectures import display_name, head_class, load_config
from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.io import atomic_write_json
from bertkit.kernels.gemm import backend_chosen
from bertkit.model_card import write_model_card
from bertkit.tasks.encoding import Feature, collate, encode
from bertkit.tasks.evaluation import evaluate, predict_features, predictions
from bertkit.tasks.multilabel import THRESHOLDS_KEY, decide, tune_thresholds
from bertkit.tasks.outputs import plot_losses, write_predictions
from bertkit.tasks.spec import Settings, TaskData
from bertkit.tasks.training import read_best, train
from bertkit.tokenizer import Tokenizer
from bertkit.train.distributed import dist_info, init_distributed

logger = logging.getLogger("bertkit")

SEARCH_GRID = {"batch_size": (16, 32), "lr": (5e-5, 3e-5, 2e-5), "epochs": (2, 3, 4)}


# ------------------------------------------------------------------------------------------------ model


def build_model(task: TaskData, model_dir: str | Path, settings: Settings) -> nn.Module:
    config = load_config(model_dir)
    if task.kind == "choice":
        config.num_labels = 1
        config.id2label = None
    elif task.labels is None:
        config.id2label = {0: "LABEL_0"}
        config.problem_type = "regression"
    else:
        config.id2label = dict(enumerate(task.labels))
        config.problem_type = "single_label_classification" if task.kind == "seq" else None
        if task.multi_label:
            config.problem_type = "multi_label_classification"
    if task.kind == "token" and isinstance(config, BertConfig):
        config.extra["use_crf"] = bool(settings.use_crf)
    elif task.kind == "token" and settings.use_crf:
        raise UserError(
            f"--crf: {model_dir} is a {config.what} model; the CRF layer is BERT's token head only"
        )
    cls = head_class(task.kind, model_dir)
    return cls.from_pretrained(model_dir, config=config, ignore_mismatched_sizes=True)


# ------------------------------------------------------------------------------------------------ the run


def _limit(examples: list, n: int | None, seed: int) -> list:
    if n is None or n >= len(examples):
        return examples
    g = torch.Generator().manual_seed(seed)
    keep = sorted(torch.randperm(len(examples), generator=g)[:n].tolist())
    return [examples[i] for i in keep]


def check_labels(task: TaskData, train_file: str, dev_file: str) -> None:
    """Dev labels must have been seen in training (a classifier cannot predict an unseen class)."""
    if task.labels is None or task.kind == "choice":
        return
    known = set(task.labels)
    for split, exs in [(dev_file, task.dev)] + list(task.extra_eval.items()):
        for e in exs:
            labs = e.tags if task.kind == "token" else e.label if task.multi_label else [str(e.label)]
            for lab in labs:
                if lab not in known:
                    raise UserError(
                        f"{split}: label {lab!r} does not occur in the training data {train_file} "
                        f"(training labels: {sorted(known)}); fix the label or add training examples"
                    )


def _one_run(task, model_dir, tok, s: Settings, train_feats, dev_feats, run_dir: Path, callbacks=()):
    t0 = time.time()
    torch.manual_seed(s.seed)  # the new head's initialisation draws from torch's default generator
    model = build_model(task, model_dir, s)
    pad_id = tok.pad_token_id

    def collate_fn(fs: list[Feature]) -> dict[str, torch.Tensor]:
        return collate(fs, task.kind, pad_id)

    def eval_fn(m: nn.Module) -> dict:
        return evaluate(m, task, task.dev, dev_feats, replace(s, progress=False), pad_id)[0]

    losses = train(
        model, train_feats, collate_fn, s, run_dir, callbacks=callbacks, eval_fn=eval_fn,
        main_metric=task.main_metric,
    )  # fmt: skip
    t1 = time.time()
    metrics, preds, raw = evaluate(model, task, task.dev, dev_feats, s, pad_id)
    return model, losses, metrics, preds, raw, t1 - t0, time.time() - t1


def finetune(
    task: TaskData,
    model_dir: str | Path,
    out_dir: str | Path,
    settings: Settings | None = None,
    search: bool = False,
    restarts: int = 1,
    train_file: str = "train",
    callbacks: Iterable[Callable[[dict], None]] = (),
) -> dict:
    """Fine-tune on ``task.train``, evaluate on ``task.dev``, write everything under ``out_dir``; returns the
    metrics.json dict. ``callbacks`` get every training step's log record (see :class:`bertkit.train.Trainer`)."""
    s = settings or Settings()
    out = Path(out_dir)
    rank, _, _ = init_distributed()
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    model_dir = Path(model_dir)
    if not task.train:
        raise UserError(f"{train_file}: no training examples")
    if not task.dev:
        raise UserError(f"{task.dev_file}: no evaluation examples")
    check_labels(task, train_file, task.dev_file)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"--model {model_dir}: no config.json there; pass a model directory in the HF layout")
    tok = Tokenizer.from_pretrained(model_dir)
    train_ex = _limit(task.train, s.max_train_examples, s.seed)
    t0 = time.time()
    train_feats = encode(task, tok, train_ex, s.max_seq_length)
    dev_feats = encode(task, tok, task.dev, s.max_seq_length)
    encode_s = time.time() - t0

    grid = itertools.product(*SEARCH_GRID.values()) if search else ()
    runs = [replace(s, **dict(zip(SEARCH_GRID, values))) for values in grid] or [s]
    runs = [replace(r, seed=r.seed + k) for r in runs for k in range(max(1, restarts))]

    best = None
    history = []
    for n, r in enumerate(runs):
        if len(runs) > 1:
            logger.info(
                "run %d/%d: batch %d lr %g epochs %g seed %d",
                n + 1,
                len(runs),
                r.batch_size,
                r.lr,
                r.epochs,
                r.seed,
            )
        run_dir = out if len(runs) == 1 else out / "runs" / _run_name(n, r)
        model, losses, metrics, preds, raw, train_s, eval_s = _one_run(
            task, model_dir, tok, r, train_feats, dev_feats, run_dir, callbacks
        )
        score = metrics[task.main_metric]
        history.append(
            {
                "batch_size": r.batch_size,
                "lr": r.lr,
                "epochs": r.epochs,
                "seed": r.seed,
                task.main_metric: score,
            }
        )
        if best is None or score > best[0]:
            best = (score, r, model, losses, metrics, preds, raw, train_s, eval_s, run_dir)
        else:
            del model
    assert best is not None
    score, r, model, losses, metrics, preds, raw, train_s, eval_s, run_dir = best
    result = _result(task, metrics, r, train_ex, train_feats, losses, (encode_s, train_s, eval_s), out)
    result["device"] = str(next(model.parameters()).device)  # where it trained (the GPU when there is one)
    result["choices"] = {"linear": backend_chosen()}  # the fp32 GEMM backend it computed with (bertkit tune)
    best_eval = read_best(run_dir) if r.keep_best else None
    if best_eval is not None:
        result["best"] = best_eval  # the evaluation whose weights were kept (they are the saved model)
    if len(runs) > 1:
        result["runs"] = history
    if task.multi_label:  # per-label thresholds tuned on dev, kept in the model's config for predict
        result["tuned"] = _tune_thresholds(model, task, raw)
    if rank != 0:  # under torchrun rank 0 writes the outputs
        return result

    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    write_model_card(
        out / "model", title=f"{task.name}: a fine-tuned {display_name(model_dir)}", kind=task.kind, task=task.name,
        data={"train": train_file, "train examples": len(train_ex), "dev": task.dev_file, "dev examples": len(task.dev)},
        hyperparameters=result["hyperparameters"], metrics=metrics, base_model=str(model_dir),
        notes=["per-label thresholds (tuned on dev) are in config.json: label_thresholds"] if task.multi_label else None,
    )  # fmt: skip
    plot_losses(
        losses, out / "loss.png", f"{task.name}: lr {r.lr:g}, batch {r.batch_size}, {r.epochs:g} epochs"
    )
    write_predictions(out / "predictions.jsonl", task, task.dev, preds, raw)

    for split, exs in task.extra_eval.items():
        feats = encode(task, tok, exs, r.max_seq_length)
        m, p, rw = evaluate(model, task, exs, feats, r, tok.pad_token_id)
        result[split] = {"metrics": m, "examples": len(exs)}
        write_predictions(out / f"predictions_{split}.jsonl", task, exs, p, rw)
    for name, exs in task.predict_sets.items():  # unlabelled test sets: the leaderboard files
        feats = encode(task, tok, exs, r.max_seq_length)
        raw = predict_features(model, feats, task.kind, r.eval_batch_size, tok.pad_token_id, r.progress)
        path = out / f"{name}.tsv"
        assert task.write_predict_set is not None
        task.write_predict_set(path, exs, predictions(task, exs, feats, raw))
        result.setdefault("predicted", {})[name] = {"file": str(path), "examples": len(exs)}
    atomic_write_json(out / "train_log.json", {"losses": losses, "runs": history})
    atomic_write_json(out / "metrics.json", result)
    return result


def _result(task, metrics, r: Settings, train_ex, train_feats, losses, seconds, out: Path) -> dict:
    """The metrics.json object."""
    encode_s, train_s, eval_s = seconds
    result = {
        "task": task.name,
        "split": "dev",
        "metrics": metrics,
        "examples": len(task.dev),
        "train_examples": len(train_ex),
        "train_features": len(train_feats),
        "hyperparameters": {k: v for k, v in asdict(r).items() if k not in ("progress", "resume")},
        "steps": len(losses),
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "first_loss": sum(losses[:20]) / max(1, len(losses[:20])),
        "seconds": {"encode": round(encode_s, 2), "train": round(train_s, 2), "eval": round(eval_s, 2)},
        "train_examples_per_second": round(_examples_seen(r, train_feats, losses) / max(train_s, 1e-9), 1),
        "model_dir": str(out / "model"),
        "world_size": dist_info()[1],
    }
    return result


def _tune_thresholds(model: nn.Module, task: TaskData, raw: list) -> dict:
    thresholds = tune_thresholds([r[1] for r in raw], [e.label for e in task.dev], task.labels)
    model.config.extra[THRESHOLDS_KEY] = dict(zip(task.labels, thresholds))
    preds = [decide(r[1], task.labels, thresholds) for r in raw]
    return {
        "thresholds": model.config.extra[THRESHOLDS_KEY],
        "metrics": task.metric(preds, [e.label for e in task.dev]),
        "note": "each label's threshold chosen for its F1 on this dev set (so these scores are optimistic); "
        "`metrics` are at 0.5. The thresholds are saved in model/config.json and used by `bertkit predict`",
    }


def _examples_seen(r: Settings, train_feats: list, losses: list) -> float:
    """Training examples processed: epochs over the features, or (with max_steps) the steps' batches."""
    if r.max_steps:
        return len(losses) * r.batch_size * r.grad_accum * dist_info()[1]
    return len(train_feats) * r.epochs


def _run_name(n: int, r: Settings) -> str:
    """A run's own directory name under ``OUT/runs`` (the same for the same arguments, so --resume finds it)."""
    return f"{n + 1:02d}-b{r.batch_size}-lr{r.lr:g}-e{r.epochs:g}-s{r.seed}"
