"""The shared fine-tuning driver: encode, batch, train, evaluate, write results.

A task is a ``TaskData`` (kind ``seq`` / ``token`` / ``choice``, train and dev examples, label list, metric);
``finetune(task, model_dir, out_dir, settings)`` then

1. tokenizes (pairs as ``[CLS] a [SEP] b [SEP]`` truncated longest-first; for tagging, each word's pieces
   with the word's label on its first sub-token and -100 on the rest, long sentences split into windows),
2. trains with the generic :class:`bertkit.train.Trainer` (see :func:`train`): AdamW (weight decay 0.01, none
   on LayerNorm/bias), linear warm-up over ``warmup_ratio`` of the steps then linear decay, gradient
   clipping 1.0, batches of similar lengths (:class:`bertkit.train.LengthGroupedBatches`, padded to the
   longest member) so little time goes on padding; optional checkpoints, resume and bf16,
3. evaluates on dev, and writes ``OUT/metrics.json`` ``{"task", "split": "dev", "metrics", "examples"}``,
   ``OUT/model`` (HF layout + tokenizer files), ``OUT/predictions.jsonl``, ``OUT/loss.png``,
   ``OUT/train_log.json``, and the Trainer's ``OUT/metrics.jsonl`` (one record per step), ``OUT/curves.png``
   and, with ``checkpoint_every``, ``OUT/checkpoints/``.

``search=True`` runs the paper's grid (batch {16, 32} x lr {5e-5, 3e-5, 2e-5} x epochs {2, 3, 4}) and
``restarts=N`` N seeds; the run best on dev is kept (its model is the one saved). With more than one run,
each run's Trainer files go to its own ``OUT/runs/NN-b…-lr…-e…-s…/`` so checkpoints never mix.

The same seed gives the same losses; a run resumed from a checkpoint (``resume=True``) continues exactly
as if it had not been interrupted (on CPU, bitwise).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.io import atomic_write, atomic_write_json
from bertkit.tokenizer import Tokenizer
from bertkit.train import LengthGroupedBatches, Trainer, build_optimizer, linear_schedule, read_jsonl

logger = logging.getLogger("bertkit")

SEARCH_GRID = {"batch_size": (16, 32), "lr": (5e-5, 3e-5, 2e-5), "epochs": (2, 3, 4)}


# ------------------------------------------------------------------------------------------------ settings


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
    precision: str = "fp32"  # or "bf16" (autocast)
    gradient_checkpointing: bool = False  # recompute encoder layers in backward (long sequences, less memory)


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


# ------------------------------------------------------------------------------------------------ encoding


@dataclass
class Feature:
    input_ids: list  # list[int], or list[list[int]] for multiple choice
    token_type_ids: list
    label: Any  # int / float / list[int] (token labels per position) / None
    example: int  # index of the example it came from
    word_start: int = 0  # tagging: index of the first word of this window in the sentence
    n_words: int = 0  # tagging: number of words in this window

    def __len__(self) -> int:
        if self.input_ids and isinstance(self.input_ids[0], list):
            return max(len(x) for x in self.input_ids)
        return len(self.input_ids)


def truncate_pair(a: list[int], b: list[int] | None, max_tokens: int) -> tuple[list[int], list[int] | None]:
    """Longest-first truncation (a token off the end of the longer segment at a time), as the original."""
    a = list(a)
    b = list(b) if b is not None else None
    while len(a) + (len(b) if b is not None else 0) > max_tokens:
        if b is not None and len(b) > len(a):
            b.pop()
        else:
            a.pop()
    return a, b


def _pack(tok: Tokenizer, a: list[int], b: list[int] | None, max_len: int) -> tuple[list[int], list[int]]:
    a, b = truncate_pair(a, b, max_len - (3 if b is not None else 2))
    ids = [tok.cls_token_id, *a, tok.sep_token_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, tok.sep_token_id]
        types += [1] * (len(b) + 1)
    return ids, types


def encode_pairs(tok: Tokenizer, a: Sequence[str], b: Sequence[str | None], max_len: int) -> list[tuple]:
    ids_a = tok.encode_batch_ids(list(a), add_special_tokens=False)
    has_b = [x is not None for x in b]
    ids_b_list = tok.encode_batch_ids([x for x in b if x is not None], add_special_tokens=False)
    it = iter(ids_b_list)
    return [_pack(tok, ia, next(it) if hb else None, max_len) for ia, hb in zip(ids_a, has_b)]


def encode_seq(
    tok: Tokenizer, examples: list, label2id: dict[str, int] | None, max_len: int
) -> list[Feature]:
    packed = encode_pairs(tok, [e.text_a for e in examples], [e.text_b for e in examples], max_len)
    feats = []
    for i, (e, (ids, types)) in enumerate(zip(examples, packed)):
        if e.label is None:
            label = None
        elif label2id is None:
            label = float(e.label)
        else:
            label = label2id[str(e.label)]
        feats.append(Feature(ids, types, label, i))
    return feats


def encode_tokens(tok: Tokenizer, sentences: list, label2id: dict[str, int], max_len: int) -> list[Feature]:
    """Label on each word's first sub-token, -100 elsewhere; sentences longer than ``max_len`` pieces are
    split into consecutive windows of whole words (a single over-long word is cut)."""
    flat = [w for s in sentences for w in s.words]
    pieces = tok.encode_batch_ids(flat, add_special_tokens=False) if flat else []
    unk = tok.unk_token_id
    feats: list[Feature] = []
    budget = max_len - 2
    k = 0
    for si, s in enumerate(sentences):
        word_pieces = []
        for _ in s.words:
            p = pieces[k] or [unk]  # a word with no pieces (e.g. control characters) still gets a slot
            word_pieces.append(p[:budget])
            k += 1
        start = 0
        while start < len(word_pieces) or (start == 0 and not word_pieces):
            ids, labels, n = [tok.cls_token_id], [-100], 0
            while start + n < len(word_pieces) and len(ids) - 1 + len(word_pieces[start + n]) <= budget:
                p = word_pieces[start + n]
                tag = s.tags[start + n] if s.tags is not None else None
                ids += p
                labels += [label2id.get(tag, -100) if tag is not None else 0] + [-100] * (len(p) - 1)
                n += 1
            ids.append(tok.sep_token_id)
            labels.append(-100)
            feats.append(Feature(ids, [0] * len(ids), labels, si, word_start=start, n_words=n))
            start += n
            if not word_pieces:
                break
    return feats


def encode_choice(tok: Tokenizer, examples: list, max_len: int) -> list[Feature]:
    n = len(examples[0].endings) if examples else 0
    ctx = [e.context for e in examples for _ in range(n)]
    ends = [x for e in examples for x in e.endings]
    packed = encode_pairs(tok, ctx, ends, max_len)
    feats = []
    for i, e in enumerate(examples):
        group = packed[i * n : (i + 1) * n]
        feats.append(Feature([g[0] for g in group], [g[1] for g in group], e.label, i))
    return feats


def encode(task: TaskData, tok: Tokenizer, examples: list, max_len: int) -> list[Feature]:
    label2id = {lab: i for i, lab in enumerate(task.labels)} if task.labels is not None else None
    if task.kind == "seq":
        return encode_seq(tok, examples, label2id, max_len)
    if task.kind == "token":
        return encode_tokens(tok, examples, label2id, max_len)
    if task.kind == "choice":
        return encode_choice(tok, examples, max_len)
    raise ValueError(f"unknown task kind {task.kind!r}")


# ------------------------------------------------------------------------------------------------ batching


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Evaluation batches: indices sorted by length, cut into batches (little padding, order irrelevant).
    Training batches come from :class:`bertkit.train.LengthGroupedBatches` (shuffled and resumable)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def collate(feats: Sequence[Feature], kind: str, pad_id: int = 0) -> dict[str, torch.Tensor]:
    if kind == "choice":
        n_choice = len(feats[0].input_ids)
        t = max(len(x) for f in feats for x in f.input_ids)
        ids = torch.full((len(feats), n_choice, t), pad_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for i, f in enumerate(feats):
            for j, (x, y) in enumerate(zip(f.input_ids, f.token_type_ids)):
                ids[i, j, : len(x)] = torch.tensor(x)
                types[i, j, : len(y)] = torch.tensor(y)
                mask[i, j, : len(x)] = 1
    else:
        t = max(len(f.input_ids) for f in feats)
        ids = torch.full((len(feats), t), pad_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for i, f in enumerate(feats):
            ids[i, : len(f.input_ids)] = torch.tensor(f.input_ids)
            types[i, : len(f.token_type_ids)] = torch.tensor(f.token_type_ids)
            mask[i, : len(f.input_ids)] = 1
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    if all(f.label is not None for f in feats):
        if kind == "token":
            labels = torch.full(ids.shape, -100, dtype=torch.long)
            for i, f in enumerate(feats):
                labels[i, : len(f.label)] = torch.tensor(f.label)
            batch["labels"] = labels
        elif isinstance(feats[0].label, float):
            batch["labels"] = torch.tensor([f.label for f in feats], dtype=torch.float)
        else:
            batch["labels"] = torch.tensor([f.label for f in feats], dtype=torch.long)
    return batch


# ------------------------------------------------------------------------------------------------ model


def model_class(kind: str):
    from bertkit.heads.finetune import (
        BertForMultipleChoice,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    return {
        "seq": BertForSequenceClassification,
        "token": BertForTokenClassification,
        "choice": BertForMultipleChoice,
    }[kind]


def build_model(task: TaskData, model_dir: str | Path, settings: Settings) -> nn.Module:
    config = BertConfig.from_pretrained(model_dir)
    if task.kind == "choice":
        config.num_labels = 1
        config.id2label = None
    elif task.labels is None:
        config.id2label = {0: "LABEL_0"}
        config.problem_type = "regression"
    else:
        config.id2label = dict(enumerate(task.labels))
        config.problem_type = "single_label_classification" if task.kind == "seq" else None
    if task.kind == "token":
        config.extra["use_crf"] = bool(settings.use_crf)
    cls = model_class(task.kind)
    return cls.from_pretrained(model_dir, config=config, ignore_mismatched_sizes=True)


# ------------------------------------------------------------------------------------------------ train / eval


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
) -> list[float]:
    """Fine-tune ``model`` in place on ``feats`` with :class:`bertkit.train.Trainer`; returns every step's loss.

    ``collate_fn(list of feats) -> batch dict`` whose ``model(**batch).loss`` is trained; ``lengths`` (default
    ``len(f)``) groups batches by length. ``s.epochs`` (may be fractional) sets the number of steps. The
    Trainer's files (``metrics.jsonl``, ``curves.png``, ``checkpoints/`` with ``s.checkpoint_every``) go to
    ``out_dir``; with ``s.resume`` training continues from its newest checkpoint, and the returned losses
    include the steps before it (read back from ``metrics.jsonl``). ``callbacks`` get each step's log record.
    With ``s.freeze_encoder`` the encoder ``model.bert`` is frozen and only the rest (the head) is trained.
    The caller's global RNG state is left as it was (dropout draws from a fork seeded with ``s.seed``).
    """
    out_dir = Path(out_dir)
    if s.freeze_encoder:
        for p in model.bert.parameters():
            p.requires_grad_(False)
    if s.gradient_checkpointing:
        model.bert.gradient_checkpointing_enable()
    batches = LengthGroupedBatches(feats, s.batch_size, collate_fn, lengths=lengths, seed=s.seed)
    total = max(1, math.ceil(batches.steps_per_epoch() * s.epochs))
    lr_by_prefix = {"crf.": s.crf_lr} if getattr(model, "crf", None) is not None else None
    opt = build_optimizer(model, lr=s.lr, weight_decay=s.weight_decay, lr_by_prefix=lr_by_prefix)
    sched = linear_schedule(opt, int(round(s.warmup_ratio * total)), total)
    encoder = model.bert if s.freeze_encoder else None

    def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
        # `m` may be the DDP wrapper: reach the encoder through `model`. The Trainer sets the whole model to
        # train mode; frozen features must not get dropout.
        if encoder is not None:
            encoder.eval()
        return m(**batch).loss

    trainer = Trainer(
        model, opt, sched, train_batches=batches, out_dir=out_dir, max_steps=total, loss_fn=loss_fn,
        clip_norm=s.max_grad_norm or None, precision=s.precision, log_every=1,
        checkpoint_every=s.checkpoint_every, seed=s.seed, progress=s.progress, callbacks=callbacks, desc=desc,
    )  # fmt: skip
    devices = [trainer.device] if trainer.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        trainer.fit(resume=s.resume)
    model.eval()
    return [r["loss"] for r in read_jsonl(out_dir / "metrics.jsonl")]


@torch.no_grad()
def predict_features(
    model: nn.Module,
    feats: list[Feature],
    kind: str,
    batch_size: int = 128,
    pad_id: int = 0,
    progress: bool = False,
) -> list:
    """Raw per-feature predictions: label id (seq/choice), float (regression), list of word label ids (token),
    plus the probability vector / score under ``scores``."""
    model.eval()
    device = next(model.parameters()).device
    out: list = [None] * len(feats)
    lengths = [len(f) for f in feats]
    regression = getattr(model.config, "problem_type", None) == "regression"
    for idx in tqdm(length_batches(lengths, batch_size), desc="eval", unit="batch", disable=not progress):
        fs = [feats[i] for i in idx]
        batch = collate(fs, kind, pad_id)
        batch.pop("labels", None)
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.cpu()
        if kind == "token":
            starts = torch.zeros(batch["input_ids"].shape, dtype=torch.bool)
            for r, f in enumerate(fs):
                for c, lab in enumerate(f.label or []):
                    starts[r, c] = lab != -100
                if f.label is None or all(v == -100 for v in f.label):
                    pass
            paths = model.decode(logits, starts)
            for r, i in enumerate(idx):
                out[i] = paths[r]
        elif regression:
            for r, i in enumerate(idx):
                out[i] = float(logits[r, 0])
        else:
            probs = logits.float().softmax(-1)
            for r, i in enumerate(idx):
                out[i] = (int(probs[r].argmax()), probs[r].tolist())
    return out


def evaluate(
    model: nn.Module, task: TaskData, examples: list, feats: list[Feature], s: Settings, pad_id: int = 0
):
    """(metrics, predictions per example as label names / floats / tag lists)."""
    raw = predict_features(model, feats, task.kind, s.eval_batch_size, pad_id, progress=s.progress)
    if task.kind == "token":
        preds: list = [["O"] * len(e.words) for e in examples]
        for f, path in zip(feats, raw):
            for j, lab in enumerate(path[: f.n_words]):
                preds[f.example][f.word_start + j] = task.labels[lab]
        gold = [e.tags for e in examples]
    elif task.labels is None:
        preds = raw
        gold = [float(e.label) for e in examples]
    elif task.kind == "choice":
        preds = [r[0] for r in raw]
        gold = [e.label for e in examples]
    else:
        preds = [task.labels[r[0]] for r in raw]
        gold = [str(e.label) for e in examples]
    return task.metric(preds, gold), preds, raw


# ------------------------------------------------------------------------------------------------ outputs


def plot_losses(losses: list[float], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, lw=0.6, alpha=0.4, label="step")
    w = max(1, len(losses) // 50)
    if len(losses) >= w:
        smooth = [
            sum(losses[max(0, i - w + 1) : i + 1]) / len(losses[max(0, i - w + 1) : i + 1])
            for i in range(len(losses))
        ]
        ax.plot(range(1, len(losses) + 1), smooth, lw=1.5, label=f"mean of {w}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


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
            labs = e.tags if task.kind == "token" else [str(e.label)]
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

    losses = train(model, train_feats, collate_fn, s, run_dir, callbacks=callbacks)
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

    if search:
        runs = [
            replace(s, batch_size=b, lr=lr, epochs=ep)
            for b, lr, ep in itertools.product(
                SEARCH_GRID["batch_size"], SEARCH_GRID["lr"], SEARCH_GRID["epochs"]
            )
        ]
    else:
        runs = [s]
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
            best = (score, r, model, losses, metrics, preds, raw, train_s, eval_s)
        else:
            del model
    assert best is not None
    score, r, model, losses, metrics, preds, raw, train_s, eval_s = best

    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    plot_losses(
        losses, out / "loss.png", f"{task.name}: lr {r.lr:g}, batch {r.batch_size}, {r.epochs:g} epochs"
    )
    _write_predictions(out / "predictions.jsonl", task, task.dev, preds, raw)

    extra = {}
    for split, exs in task.extra_eval.items():
        feats = encode(task, tok, exs, r.max_seq_length)
        m, p, rw = evaluate(model, task, exs, feats, r, tok.pad_token_id)
        extra[split] = {"metrics": m, "examples": len(exs)}
        _write_predictions(out / f"predictions_{split}.jsonl", task, exs, p, rw)

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
        "train_examples_per_second": round(len(train_feats) * r.epochs / max(train_s, 1e-9), 1),
        "model_dir": str(out / "model"),
    }
    if extra:
        result.update(extra)
    if len(runs) > 1:
        result["runs"] = history
    atomic_write_json(out / "train_log.json", {"losses": losses, "runs": history})
    atomic_write_json(out / "metrics.json", result)
    return result


def _run_name(n: int, r: Settings) -> str:
    """A run's own directory name under ``OUT/runs`` (the same for the same arguments, so --resume finds it)."""
    return f"{n + 1:02d}-b{r.batch_size}-lr{r.lr:g}-e{r.epochs:g}-s{r.seed}"


def _write_predictions(path: Path, task: TaskData, examples: list, preds: list, raw: list) -> None:
    with atomic_write(path) as f:
        for i, (e, p) in enumerate(zip(examples, preds)):
            if task.kind == "token":
                row = {"index": i, "words": e.words, "gold": e.tags, "pred": p}
            else:
                row = {"guid": getattr(e, "guid", str(i)), "pred": p, "gold": e.label}
                if task.labels is not None and task.kind == "seq":
                    row["probs"] = {lab: round(v, 6) for lab, v in zip(task.labels, raw[i][1])}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
