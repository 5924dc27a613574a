"""``bertkit train-embed``: train a :class:`~.encoder.SentenceEncoder` on the generic Trainer.

Losses: ``mnrl`` (query/positive pairs, in-batch negatives plus any hard negatives; ``symmetric`` adds the
passage->query direction), ``cosine`` and ``cosent`` (scored pairs; cosine wants the scores in [0, 1], so
a file whose scores exceed 1 is divided by its maximum, e.g. STS-B's 0-5).

Hard negatives (``hard_negatives=N``, mnrl only): before training, the *current* model encodes the corpus
(``corpus`` texts, default every positive of the training file) and each query's top passages are
searched exactly; the first N that are not its positive (nor textually equal to it) become its negatives.
Each batch of B queries then scores B positives + B*N negatives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..io import atomic_write_json
from ..train.simple import AdamWSettings, fit_and_save
from .data import Pair
from .encoder import SentenceEncoder, rank_corpus
from .losses import cosent, cosine_loss, mnrl

logger = logging.getLogger("bertkit")
LOSSES = ("mnrl", "cosine", "cosent")


@dataclass
class EmbedSettings(AdamWSettings):
    loss: str = "mnrl"
    symmetric: bool = False
    scale: float = 20.0
    hard_negatives: int = 0


def mine_hard_negatives(
    model: SentenceEncoder, pairs: Sequence[Pair], corpus: Sequence[str], n: int, batch_size: int = 64
) -> list[Pair]:
    """Each query's ``n`` best-scoring corpus passages under ``model`` that are not its positive -> the pairs
    with those as ``negatives`` (given negatives are replaced)."""

    corpus = list(dict.fromkeys(corpus))  # unique, order kept
    _, top = rank_corpus(model, [p.query for p in pairs], corpus, n + 5, batch_size)
    out = []
    for p, row in zip(pairs, top):
        negs = [corpus[j] for j in row if j >= 0 and corpus[j] != p.positive][:n]
        out.append(Pair(p.query, p.positive, negs, p.score))
    return out


def _collate(model: SentenceEncoder, scored: bool, items: list[Pair]) -> dict[str, Any]:
    """Examples -> a batch dict of tokenized texts (``q``, ``p``, optional ``n``) and ``scores``."""
    batch: dict[str, Any] = {
        "q": dict(model.tokenize_batch([p.query for p in items])),
        "p": dict(model.tokenize_batch([p.positive for p in items])),
    }
    negs = [n for p in items for n in p.negatives]
    if negs and not scored:
        batch["n"] = dict(model.tokenize_batch(negs))
    if scored:
        batch["scores"] = torch.tensor([p.score for p in items], dtype=torch.float32)
    return batch


def _tokens(batch: dict[str, Any]) -> int:
    return sum(int(v["attention_mask"].sum()) for k, v in batch.items() if isinstance(v, dict))


def embed_together(model: SentenceEncoder, encodings: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
    """Embeddings [B_i, D] of several tokenized batches ([B_i, T_i] each: queries, passages, negatives) from
    one forward pass over them all, padded to the longest T. The same vectors as one pass per batch (the
    padding is masked; bertkit's packing skips it): one pass runs each layer's ops once instead of once per
    batch, and the queries' few tokens join the passages' in the same GEMMs."""
    longest = max(e["input_ids"].shape[1] for e in encodings)

    def cat(key: str) -> torch.Tensor:
        return torch.cat([torch.nn.functional.pad(e[key], (0, longest - e[key].shape[1])) for e in encodings])

    types = cat("token_type_ids") if all(e.get("token_type_ids") is not None for e in encodings) else None
    out = model(cat("input_ids"), cat("attention_mask"), types)
    return list(out.split([e["input_ids"].shape[0] for e in encodings]))


def make_loss_fn(settings: EmbedSettings):
    """``loss_fn(model, batch)`` for the Trainer."""

    def loss_fn(model, batch):
        parts = embed_together(model, [batch[k] for k in ("q", "p", "n") if k in batch])
        q, p = parts[0], parts[1]
        if settings.loss == "mnrl":
            n = parts[2] if len(parts) > 2 else None
            return mnrl(q, p, n, scale=settings.scale, symmetric=settings.symmetric)
        if settings.loss == "cosine":
            return cosine_loss(q, p, batch["scores"])
        return cosent(q, p, batch["scores"], scale=settings.scale)

    return loss_fn


def train_embed(
    model: SentenceEncoder,
    pairs: list[Pair],
    out_dir: str | Path,
    settings: EmbedSettings,
    corpus: Sequence[str] | None = None,
    eval_fn=None,
    progress: bool = True,
    plot: bool = True,
) -> dict[str, Any]:
    """Train ``model`` on ``pairs``; save it under ``OUT/model`` (sentence-transformers folder) and write
    ``OUT/train_log.json``. Returns the summary (steps, final loss, pairs/s). ``plot``: draw
    ``OUT/curves.png`` at the end (about 1.5 s of matplotlib; ``train_seconds`` includes it)."""
    s = settings
    if s.loss not in LOSSES:
        raise UserError(f"unknown --loss {s.loss!r}; choose one of {', '.join(LOSSES)}")
    scored = s.loss in ("cosine", "cosent")
    if scored and any(p.score is None for p in pairs):
        raise UserError(f"--loss {s.loss} needs scored pairs (sentence1, sentence2, score)")
    if not scored and any(p.score is not None for p in pairs):
        raise UserError(
            "--loss mnrl needs (query, positive) pairs; scored pairs go with --loss cosine or cosent"
        )
    if s.hard_negatives and scored:
        raise UserError("--hard-negatives works with --loss mnrl only")
    if s.batch_size < 2 and s.loss != "cosine":
        raise UserError(f"--batch-size must be >= 2 for --loss {s.loss} (the batch holds the negatives)")
    if len(pairs) < s.batch_size:
        raise UserError(f"{len(pairs)} training pairs are fewer than one batch (--batch-size {s.batch_size})")
    if s.loss == "cosine":
        top = max(p.score for p in pairs)
        if top > 1:
            pairs = [Pair(p.query, p.positive, p.negatives, p.score / top) for p in pairs]
    out_dir = Path(out_dir)
    mined_s = 0.0
    if s.hard_negatives:
        t0 = time.perf_counter()
        pairs = mine_hard_negatives(model, pairs, corpus or [p.positive for p in pairs], s.hard_negatives)
        mined_s = time.perf_counter() - t0
    trainer, steps = s.trainer(
        model, pairs, partial(_collate, model, scored), out_dir=out_dir, loss_fn=make_loss_fn(s), tokens_fn=_tokens,
        eval_fn=eval_fn, progress=progress, desc="train-embed", plot=plot,
    )  # fmt: skip
    summary, train_s = fit_and_save(trainer, model, out_dir / "model")
    result = {
        "loss_name": s.loss,
        "steps": steps,
        "pairs": len(pairs),
        "pairs_seen": steps * s.batch_size,
        "train_seconds": round(train_s, 2),
        "pairs_per_second": round(steps * s.batch_size / train_s, 2) if train_s > 0 else None,
        "mining_seconds": round(mined_s, 2),
        "precision": trainer.precision,  # what "auto" resolved to
        "final_loss": summary.get("loss"),
        "eval": summary.get("eval"),
        "settings": s.__dict__,
        "model": str(out_dir / "model"),
    }
    atomic_write_json(out_dir / "train_log.json", result)
    from ..model_card import write_model_card

    write_model_card(
        out_dir / "model", title="A sentence encoder trained with bertkit train-embed", kind="embed",
        task=f"sentence embeddings, loss {s.loss}",
        data={"training pairs": len(pairs), "hard negatives per pair": s.hard_negatives or 0},
        hyperparameters={k: v for k, v in s.__dict__.items() if isinstance(v, (int, float, str, bool))},
        metrics={k: v for k, v in (summary.get("eval") or {}).items() if isinstance(v, (int, float))},
        metrics_split="evaluation during training",
    )  # fmt: skip
    return result
