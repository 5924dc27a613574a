"""``bertkit train-rerank``: a cross-encoder (``[CLS] query [SEP] passage [SEP]`` -> one logit) trained with
binary cross-entropy on (query, passage, label) triples.

The triples come from labelled pairs as they are, or from (query, positive) pairs plus negatives: the
pair's own ``negatives``, ``sampled`` ones (passages drawn uniformly from the corpus, never the positive)
and ``hard`` ones (the best-scoring non-positive passages of a bi-encoder, ``hard_negatives_model``).
The model is a :class:`~.cross_encoder.CrossEncoder` with a new one-logit head (``num_labels=1``), saved
as a Hugging Face sequence-classification dir.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UserError
from ..io import atomic_write_json
from ..train.simple import AdamWSettings, fit_and_save
from .data import Pair


@dataclass
class RerankSettings(AdamWSettings):
    negatives: int = 3  # sampled negatives per query
    hard_negatives: int = 0  # mined negatives per query (needs hard_negatives_model)
    max_length: int = 256


def build_triples(
    pairs: Sequence[Pair],
    corpus: Sequence[str],
    settings: RerankSettings,
    rng: random.Random,
    hard_model: Any = None,
) -> list[tuple[str, str, float]]:
    """(query, passage, label) triples (see the module docstring); labelled pairs pass through."""
    if all(p.score is not None for p in pairs):
        return [(p.query, p.positive, float(p.score)) for p in pairs]
    if settings.hard_negatives:
        if hard_model is None:
            raise UserError("--hard-negatives needs --hard-negatives-model (a bi-encoder to mine with)")
        from .train_embed import mine_hard_negatives

        mined = mine_hard_negatives(hard_model, pairs, corpus, settings.hard_negatives)
    else:
        mined = [Pair(p.query, p.positive) for p in pairs]
    pool = list(dict.fromkeys(corpus))
    if settings.negatives and len(pool) < 2:
        raise UserError("sampled negatives need a corpus of at least 2 passages (--corpus)")
    triples = []
    for p, m in zip(pairs, mined):
        triples.append((p.query, p.positive, 1.0))
        negs = list(p.negatives) + list(m.negatives)
        for _ in range(settings.negatives):
            for _try in range(10):
                cand = pool[rng.randrange(len(pool))]
                if cand != p.positive:
                    negs.append(cand)
                    break
        triples.extend((p.query, n, 0.0) for n in negs)
    return triples


def train_rerank(
    model_dir: str | Path,
    triples: list[tuple[str, str, float]],
    out_dir: str | Path,
    settings: RerankSettings,
    progress: bool = True,
) -> dict[str, Any]:
    """Fine-tune ``model_dir`` (any BERT dir; a new one-logit head) on the triples; save ``OUT/model``."""
    from .cross_encoder import CrossEncoder

    s = settings
    if len(triples) < s.batch_size:
        raise UserError(
            f"{len(triples)} training pairs are fewer than one batch (--batch-size {s.batch_size})"
        )
    out_dir = Path(out_dir)
    model = CrossEncoder.from_pretrained(model_dir, max_length=s.max_length, num_labels=1)

    def collate(items: list[tuple[str, str, float]]) -> dict[str, torch.Tensor]:
        enc = model.tokenize_batch([(q, p) for q, p, _ in items])
        return {**enc, "labels": torch.tensor([y for _, _, y in items], dtype=torch.float32)}

    def loss_fn(m, batch):
        labels = batch.pop("labels")
        logits = m(**batch)[:, 0]
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
        acc = ((logits > 0).float() == labels).float().sum()
        return loss, {"accuracy": (acc, float(len(labels)))}

    trainer, steps = s.trainer(
        model, triples, collate, out_dir=out_dir, loss_fn=loss_fn, progress=progress, desc="train-rerank"
    )
    summary, seconds = fit_and_save(trainer, model, out_dir / "model")
    result = {
        "steps": steps,
        "triples": len(triples),
        "positives": sum(1 for t in triples if t[2] > 0.5),
        "train_seconds": round(seconds, 2),
        "pairs_per_second": round(steps * s.batch_size / seconds, 2) if seconds > 0 else None,
        "final_loss": summary.get("loss"),
        "settings": s.__dict__,
        "model": str(out_dir / "model"),
    }
    atomic_write_json(out_dir / "train_log.json", result)
    return result
