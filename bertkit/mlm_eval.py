"""Held-out masked-LM scores of a model directory, and the unigram baseline they must beat.

Used by ``bertkit experiment`` (every pre-training cell, so models trained by different code are scored
alike) and by ``make run``. The held-out sequences are the valid split of a ``bertkit prepare`` directory,
single segments, masked 15% (80/10/10) with a fixed seed: every model sees the same masks.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import torch


def _dataset(data_dir: Path, max_seq_length: int, split: str, valid_documents: int | None, seed: int):
    from bertkit.data.dynamic import PretrainingDataset

    return PretrainingDataset(str(data_dir), max_seq_length=max_seq_length, seed=seed, no_nsp=True, split=split,
                              valid_documents=valid_documents,
                              max_predictions_per_seq=max(20, round(0.15 * max_seq_length) + 1))  # fmt: skip


@torch.no_grad()
def heldout_mlm(
    model_dir: str | Path,
    data_dir: str | Path,
    max_seq_length: int,
    valid_documents: int | None = None,
    batch_size: int = 64,
    max_batches: int = 20,
    seed: int = 1234,
) -> dict:
    """Masked-LM loss, perplexity and accuracy of ``model_dir`` (bertkit's BertForMaskedLM, whatever trained
    the weights) on the first ``max_batches`` batches of the held-out split, plus the accuracy of always
    predicting the training data's most frequent masked token (``unigram_accuracy``) and how many distinct
    tokens the model predicted (``distinct_predictions``: 1 means it fills every blank alike)."""
    from bertkit.heads.pretraining import BertForMaskedLM, pretraining_metrics

    data_dir = Path(data_dir)
    ds = _dataset(data_dir, max_seq_length, "valid", valid_documents, seed)
    top = most_frequent_masked_token(data_dir, max_seq_length, valid_documents, seed)
    model = BertForMaskedLM.from_pretrained(model_dir)
    model.eval()
    n = min(len(ds), batch_size * max_batches)
    sums: dict[str, list[float]] = {}
    unigram_hits, predicted = 0, Counter()
    for start in range(0, n, batch_size):
        b = ds.collate([ds[i] for i in range(start, min(start + batch_size, n))])
        labels = b["labels"]
        o = model(input_ids=b["input_ids"], attention_mask=b.get("attention_mask"),
                  token_type_ids=b.get("token_type_ids"), labels=labels)  # fmt: skip
        for k, (a, c) in pretraining_metrics(o, labels=labels).items():
            acc = sums.setdefault(k, [0.0, 0.0])
            acc[0] += a
            acc[1] += c
        gold = labels[labels != -100]
        unigram_hits += int((gold == top).sum())
        logits = o.logits
        # with labels the head may score only the masked rows ([M, V]); else every position ([B, T, V])
        preds = logits.argmax(-1) if logits.dim() == 2 else logits[labels != -100].argmax(-1)
        predicted.update(preds.reshape(-1).tolist())
    masked = sums["masked_lm_accuracy"][1]
    loss = sums["masked_lm_loss"][0] / sums["masked_lm_loss"][1]
    return {"mlm_loss": round(loss, 4), "mlm_perplexity": round(math.exp(min(loss, 50)), 2),
            "mlm_accuracy": round(sums["masked_lm_accuracy"][0] / masked, 4),
            "unigram_accuracy": round(unigram_hits / masked, 4), "distinct_predictions": len(predicted),
            "sequences": n, "masked_tokens": int(masked)}  # fmt: skip


def most_frequent_masked_token(
    data_dir: Path, max_seq_length: int, valid_documents: int | None, seed: int, batches: int = 50
) -> int:
    """The id most often under a mask in the first ``batches`` x 64 training sequences (the unigram guess)."""
    ds = _dataset(data_dir, max_seq_length, "train", valid_documents, seed)
    counts: Counter = Counter()
    for start in range(0, min(len(ds), 64 * batches), 64):
        labels = ds.collate([ds[i] for i in range(start, min(start + 64, len(ds)))])["labels"]
        counts.update(labels[labels != -100].tolist())
    return counts.most_common(1)[0][0]
