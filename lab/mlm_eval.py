"""Held-out masked-LM scores of a model directory, and the baselines they must beat.

Used by ``python -m lab experiment`` (every pre-training cell, so models trained by different code are scored
alike) and by ``make run``. The held-out sequences are the valid split of a ``bertkit prepare`` directory,
single segments, masked 15% (80/10/10) with a fixed seed: every model sees the same masks.

Two baselines say what a score means:

- **unigram**: always the training data's most frequent masked token (accuracy), and the training data's
  token frequencies as the prediction for every blank (cross-entropy, ``unigram_loss``). A model at the
  unigram loss has learned nothing from the context.
- **word order**: the same masked sequences with their tokens shuffled (each sequence's tokens between
  ``[CLS]`` and ``[SEP]`` permuted, the masks moving with their tokens). ``word_order_gain`` is the loss on
  shuffled text minus the loss on the text in order, in nats: 0 for a model that reads its context as a
  bag of words, as BERT does early in pre-training before its attention finds the neighbouring words; a
  model that has learned word order loses nats per token when it goes (docs/results/checkpoint-probe.md).
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
    tokens the model predicted (``distinct_predictions``: 1 means it fills every blank alike); the unigram
    cross-entropy (``unigram_loss``) and the loss on the same sequences shuffled (``shuffled_mlm_loss``,
    ``word_order_gain``: see the module docstring). A finished ELECTRA run's model directory (its
    ``electra/`` folders beside the discriminator) is scored by its generator, the network that predicts
    masked tokens (:class:`ElectraGeneratorMLM`); a ModernBERT one by its own masked-LM head."""
    from bertkit.heads.pretraining import pretraining_metrics

    data_dir = Path(data_dir)
    ds = _dataset(data_dir, max_seq_length, "valid", valid_documents, seed)
    train = _dataset(
        data_dir, max_seq_length, "train", valid_documents, seed
    )  # built once, read for both baselines
    top = _masked_counts(train).most_common(1)[0][0]
    model = _masked_lm(model_dir)
    model.eval()
    n = min(len(ds), batch_size * max_batches)
    sums: dict[str, list[float]] = {}
    unigram_hits, unigram_nll, shuffled_nll, predicted = 0, 0.0, 0.0, Counter()
    log_unigram = _log_unigram(_text_counts(train), model.config.vocab_size)
    shuffle_gen = torch.Generator().manual_seed(seed)
    for start in range(0, n, batch_size):
        b = ds.collate([ds[i] for i in range(start, min(start + batch_size, n))])
        labels = b["labels"]
        o = model(input_ids=b["input_ids"], attention_mask=b.get("attention_mask"),
                  token_type_ids=b.get("token_type_ids"), labels=labels)  # fmt: skip
        ids_s, labels_s = shuffle_within_sequences(b["input_ids"], labels, b["attention_mask"], shuffle_gen)
        o_s = model(input_ids=ids_s, attention_mask=b.get("attention_mask"),
                    token_type_ids=b.get("token_type_ids"), labels=labels_s)  # fmt: skip
        shuffled_nll += pretraining_metrics(o_s, labels=labels_s)["masked_lm_loss"][0]
        for k, (a, c) in pretraining_metrics(o, labels=labels).items():
            acc = sums.setdefault(k, [0.0, 0.0])
            acc[0] += a
            acc[1] += c
        gold = labels[labels != -100]
        unigram_hits += int((gold == top).sum())
        unigram_nll -= float(log_unigram[gold].sum())
        logits = o.logits
        # with labels the head may score only the masked rows ([M, V]); else every position ([B, T, V])
        preds = logits.argmax(-1) if logits.dim() == 2 else logits[labels != -100].argmax(-1)
        predicted.update(preds.reshape(-1).tolist())
    masked = sums["masked_lm_accuracy"][1]
    loss = sums["masked_lm_loss"][0] / sums["masked_lm_loss"][1]
    shuffled = shuffled_nll / sums["masked_lm_loss"][1]
    return {"mlm_loss": round(loss, 4), "mlm_perplexity": round(math.exp(min(loss, 50)), 2),
            "mlm_accuracy": round(sums["masked_lm_accuracy"][0] / masked, 4),
            "unigram_accuracy": round(unigram_hits / masked, 4), "unigram_loss": round(unigram_nll / masked, 4),
            "shuffled_mlm_loss": round(shuffled, 4), "word_order_gain": round(shuffled - loss, 4),
            "distinct_predictions": len(predicted), "sequences": n, "masked_tokens": int(masked)}  # fmt: skip


def _masked_lm(model_dir: str | Path) -> torch.nn.Module:
    """The network of ``model_dir`` that fills masked tokens: an ELECTRA run's generator, a ModernBERT model's
    masked-LM head, else BERT's (``BertForMaskedLM``). A ModernBERT ELECTRA run's generator is itself a
    ``ModernBertForMaskedLM`` folder."""
    from bertkit.architectures import is_modernbert

    generator = Path(model_dir) / "electra" / "generator"
    if generator.is_dir():
        if not is_modernbert(generator):
            return ElectraGeneratorMLM(generator.parent)
        model_dir = generator
    if is_modernbert(model_dir):
        from bertkit.modernbert import ModernBertForMaskedLM

        # scored on the labelled rows only ([M, V] logits), as BERT's head scores them
        return ModernBertForMaskedLM.from_pretrained(model_dir, sparse_prediction=True)
    from bertkit.heads.pretraining import BertForMaskedLM

    return BertForMaskedLM.from_pretrained(model_dir)


class ElectraGeneratorMLM(torch.nn.Module):
    """An ELECTRA run's generator as a masked LM for :func:`heldout_mlm`: the saved encoder is the
    discriminator, which has no masked-LM head, so the held-out loss and word-order gain of an ELECTRA run are
    its generator's (the network whose masked-LM loss the run trained)."""

    def __init__(self, electra_dir: str | Path) -> None:
        super().__init__()
        from bertkit.electra import load_pretrained_electra

        self.electra = load_pretrained_electra(electra_dir)
        self.config = self.electra.config

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        """[B, T] ids as the data masked them -> logits [M, V] and the mean cross-entropy at the M labelled
        positions (``masked_lm_labels``: their labels)."""
        from bertkit.heads.pretraining import IGNORE_INDEX, MaskedLMOutput

        e = self.electra
        hidden = e.generator(input_ids, attention_mask, token_type_ids).last_hidden_state
        keep = labels != IGNORE_INDEX
        logits = e.generator_lm_head(e.generator_predictions(hidden[keep]))
        gold = labels[keep]
        loss = torch.nn.functional.cross_entropy(logits.float(), gold)
        return MaskedLMOutput(loss=loss, logits=logits, masked_lm_labels=gold)


def shuffle_within_sequences(
    input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids, labels, attention_mask [B, T] -> (input_ids, labels) [B, T] with each sequence's tokens
    between its first and last real position ([CLS] ... [SEP]) in a random order; a token's label moves with
    it, so the same blanks are scored with the same context words, only their order lost."""
    ids, labs = input_ids.clone(), labels.clone()
    for i, n in enumerate(attention_mask.sum(1).tolist()):
        if n > 3:
            order = torch.randperm(n - 2, generator=generator) + 1
            ids[i, 1 : n - 1] = input_ids[i, order]
            labs[i, 1 : n - 1] = labels[i, order]
    return ids, labs


def _log_unigram(counts: Counter, vocab_size: int, pseudo_count: float = 0.1) -> torch.Tensor:
    """[V] log-probabilities of the training sample's token frequencies, smoothed by ``pseudo_count`` per id
    (a held-out token the sample never saw still gets a finite loss)."""
    freq = torch.full((vocab_size,), pseudo_count, dtype=torch.float64)
    for token, c in counts.items():
        freq[token] += c
    return (freq / freq.sum()).log()


def masked_token_counts(
    data_dir: Path, max_seq_length: int, valid_documents: int | None, seed: int, batches: int = 50
) -> Counter:
    """How often each id is under a mask in the first ``batches`` x 64 training sequences."""
    return _masked_counts(_dataset(data_dir, max_seq_length, "train", valid_documents, seed), batches)


def _masked_counts(train, batches: int = 50) -> Counter:
    counts: Counter = Counter()
    for start in range(0, min(len(train), 64 * batches), 64):
        labels = train.collate([train[i] for i in range(start, min(start + 64, len(train)))])["labels"]
        counts.update(labels[labels != -100].tolist())
    return counts


def _text_counts(train, batches: int = 50) -> Counter:
    """How often each id occurs in ``batches`` x 64 sequences spread evenly through the training split ``train``
    (its first sequences are one book's). Masks fall on text tokens uniformly, so this estimates the masked
    tokens' frequencies from ~8x the tokens; special tokens are left out, as they are never masked."""
    counts: Counter = Counter()
    spread = torch.linspace(0, len(train) - 1, min(len(train), 64 * batches)).long().unique().tolist()
    for start in range(0, len(spread), 64):
        b = train.collate([train[i] for i in spread[start : start + 64]])
        labels = b["labels"]
        original = torch.where(labels != -100, labels, b["input_ids"])  # the text before masking
        real = b["attention_mask"].bool()
        real[:, 0] = False  # [CLS]
        real[torch.arange(real.size(0)), b["attention_mask"].sum(1) - 1] = False  # the closing [SEP]
        counts.update(original[real].tolist())
    return counts
