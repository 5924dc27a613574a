"""The cross-encoder: ``[CLS] query [SEP] passage [SEP]`` -> a sequence-classification head, one module
used to score pairs (``predict``, ``rerank``) and to train (``forward`` on padded batches, ``save``).

The saved folder is a Hugging Face sequence-classification dir: bertkit's ``CrossEncoder`` and
sentence-transformers' ``CrossEncoder`` both load it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .batching import length_batches, pad, predicting


class CrossEncoder(nn.Module):
    """Scores (query, document) pairs jointly with a BertForSequenceClassification head.

    With ``num_labels == 1`` the score is the raw logit (as sentence-transformers' CrossEncoder
    rankers); with more labels it is the logit of the last label.
    Built in eval mode; a trainer switches it to train mode.
    """

    def __init__(self, model: nn.Module, tokenizer: Any, max_length: int = 512) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = min(max_length, model.config.max_tokens)
        self.eval()

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike,
        max_length: int = 512,
        device: str | torch.device | None = None,
        num_labels: int | None = None,
    ) -> CrossEncoder:
        """A sequence-classification dir; ``num_labels=1`` on a plain BERT dir starts a new one-logit head
        (to train)."""
        from ..heads.finetune import BertForSequenceClassification
        from ..tokenizer import Tokenizer

        overrides = {} if num_labels is None else {"num_labels": num_labels}
        model = BertForSequenceClassification.from_pretrained(model_dir, **overrides)
        if device is not None:
            model.to(device)
        return cls(model, Tokenizer.from_pretrained(model_dir), max_length=max_length)

    def save(self, out_dir: str | os.PathLike) -> Path:
        out_dir = Path(out_dir)
        self.model.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
        return out_dir

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Logits [B, num_labels] of a padded batch of pairs [B, T]."""
        return self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    def _tokenize(self, pairs: Sequence[tuple[str, str]], **kwargs: Any) -> Any:
        return self.tokenizer(
            [a for a, _ in pairs], [b for _, b in pairs], max_length=self.max_length, **kwargs
        )

    def tokenize_batch(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Tensor]:
        """Padded training batch tensors (``input_ids``, ``token_type_ids``, ``attention_mask``) [B, T]."""
        return dict(self._tokenize(pairs, padding=True, truncation=True, return_tensors="pt"))

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """Score each (a, b) pair -> float32 array [N]. Batches are formed by length."""
        pairs = list(pairs)
        scores = np.zeros(len(pairs), dtype=np.float32)
        if not pairs:
            return scores
        enc = self._tokenize(pairs, truncation="longest_first", padding=False, return_tensors=None)
        ids, types = enc["input_ids"], enc["token_type_ids"]
        device = self.model.device
        with predicting(self):
            for idx in length_batches(ids, batch_size):
                t_ids, t_mask, t_types = pad(
                    [ids[i] for i in idx], self.tokenizer.pad_token_id, [types[i] for i in idx]
                )
                logits = self(t_ids.to(device), t_mask.to(device), t_types.to(device)).float()
                scores[idx] = logits[:, -1].cpu().numpy()  # one logit, or the last label's
        return scores

    def rerank(
        self, query: str, docs: Sequence[str], top_k: int | None = None, batch_size: int = 32
    ) -> list[tuple[int, float]]:
        """[(doc index, score)] sorted best first (ties keep the input order)."""
        scores = self.predict([(query, d) for d in docs], batch_size=batch_size)
        ranked = sorted(range(len(docs)), key=lambda i: -float(scores[i]))[:top_k]  # top_k None: all
        return [(i, float(scores[i])) for i in ranked]
