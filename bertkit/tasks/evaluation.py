"""Running a fine-tuned model over encoded examples: raw predictions per feature, metrics per example."""

from __future__ import annotations

import torch
from torch import nn
from tqdm.auto import tqdm

from bertkit.tasks.encoding import Feature, collate, length_batches
from bertkit.tasks.multilabel import decide
from bertkit.tasks.spec import Settings, TaskData


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
    # one output and no problem_type (a cross-encoder or reranker saved by transformers) is a score too
    regression = getattr(model.config, "problem_type", None) == "regression" or (
        kind == "seq" and getattr(model.config, "num_labels", 2) == 1
    )
    multi_label = getattr(model.config, "problem_type", None) == "multi_label_classification"
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
            paths = model.decode(logits, starts)
            for r, i in enumerate(idx):
                out[i] = paths[r]
        elif regression:
            for r, i in enumerate(idx):
                out[i] = float(logits[r, 0])
        elif multi_label:  # each label on its own: sigmoid, predicted at >= 0.5 here
            probs = logits.float().sigmoid()
            for r, i in enumerate(idx):
                out[i] = ((probs[r] >= 0.5).nonzero().flatten().tolist(), probs[r].tolist())
        else:
            probs = logits.float().softmax(-1)
            for r, i in enumerate(idx):
                out[i] = (int(probs[r].argmax()), probs[r].tolist())
    return out


def predictions(task: TaskData, examples: list, feats: list[Feature], raw: list) -> list:
    """Per-example predictions from :func:`predict_features`' output: label names (seq), lists of label names
    (multi-label, each at 0.5), floats (regression), ending indices (choice), tag lists (token; words past
    every window stay "O")."""
    if task.multi_label:
        return [decide(r[1], task.labels) for r in raw]
    if task.kind == "token":
        preds: list = [["O"] * len(e.words) for e in examples]
        for f, path in zip(feats, raw):
            for j, lab in enumerate(path[: f.n_words]):
                preds[f.example][f.word_start + j] = task.labels[lab]
        return preds
    if task.kind == "choice":  # (a choice task has no label names either: test it before regression)
        return [r[0] for r in raw]
    if task.labels is None:
        return list(raw)
    return [task.labels[r[0]] for r in raw]


def evaluate(
    model: nn.Module, task: TaskData, examples: list, feats: list[Feature], s: Settings, pad_id: int = 0
):
    """(metrics, predictions per example as label names / floats / tag lists, raw per-feature outputs)."""
    raw = predict_features(model, feats, task.kind, s.eval_batch_size, pad_id, progress=s.progress)
    preds = predictions(task, examples, feats, raw)
    if task.kind == "token":
        gold = [e.tags for e in examples]
    elif task.kind == "choice" or task.multi_label:
        gold = [e.label for e in examples]
    elif task.labels is None:
        gold = [float(e.label) for e in examples]
    else:
        gold = [str(e.label) for e in examples]
    return task.metric(preds, gold), preds, raw
