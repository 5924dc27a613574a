"""A trainable sentence encoder: BERT -> pooling (cls | mean | max) -> optional Dense -> optional Normalize.

Saved as a sentence-transformers folder that ``SentenceTransformer(dir)`` loads as is, and that
``bertkit.embed.SentenceEncoder`` reads back::

    config.json, model.safetensors, vocab.txt, tokenizer_config.json   the Transformer module (folder root)
    sentence_bert_config.json                                         max_seq_length, do_lower_case
    modules.json                                                      Transformer, Pooling, [Dense], [Normalize]
    1_Pooling/config.json   [2_Dense/{config.json, model.safetensors}]   [N_Normalize/]
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..embed import Dense, SentenceEncoder
from ..errors import UserError
from ..io import atomic_dir, atomic_write_json
from ..pooling import pool

POOLINGS = ("mean", "cls", "max")
_ST_POOLING = {
    "mean": "pooling_mode_mean_tokens",
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
}


class BiEncoder(nn.Module):
    """``forward(input_ids [B, T], attention_mask [B, T]) -> [B, D]`` sentence vectors."""

    def __init__(
        self,
        bert: nn.Module,
        tokenizer: Any,
        pooling: str = "mean",
        dense: Sequence[Dense] = (),
        normalize: bool = False,
        max_seq_length: int = 256,
        lowercase_input: bool = False,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS + ("mean_sqrt_len",):
            raise UserError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        self.bert = bert
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.dense = nn.ModuleList(dense)
        self.normalize = normalize
        self.max_seq_length = min(max_seq_length, bert.config.max_position_embeddings)
        self.lowercase_input = lowercase_input

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike,
        pooling: str | None = None,
        dense_dim: int | None = None,
        dense_activation: str = "torch.nn.modules.activation.Tanh",
        normalize: bool | None = None,
        max_seq_length: int | None = None,
        seed: int = 0,
    ) -> BiEncoder:
        """A sentence-transformers folder or a plain BERT dir; ``dense_dim`` appends a new Dense layer
        (initialised from ``seed``) on top of whatever the folder has."""
        enc = SentenceEncoder.from_pretrained(model_dir, pooling=pooling, max_seq_length=max_seq_length)
        dense = list(enc.dense)
        if dense_dim:
            g = torch.Generator().manual_seed(seed)
            new = Dense(enc.dim, dense_dim, activation=dense_activation)
            with torch.no_grad():  # nn.Linear's default init, from our generator
                bound = 1.0 / np.sqrt(enc.dim)
                new.linear.weight.copy_(torch.rand(new.linear.weight.shape, generator=g) * 2 * bound - bound)
                new.linear.bias.copy_(torch.rand(new.linear.bias.shape, generator=g) * 2 * bound - bound)
            dense.append(new)
        return cls(
            enc.model,
            enc.tokenizer,
            enc.pooling,
            dense,
            enc.normalize if normalize is None else normalize,
            enc.max_seq_length,
            enc.lowercase_input,
        )

    @property
    def dim(self) -> int:
        return self.dense[-1].out_features if len(self.dense) else self.bert.config.hidden_size

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> Tensor:
        hidden = self.bert(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        vec = pool(hidden, attention_mask, self.pooling)
        for d in self.dense:
            vec = d(vec)
        return F.normalize(vec, dim=-1) if self.normalize else vec

    def tokenize(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Padded batch tensors (``input_ids``, ``attention_mask``, ``token_type_ids``) [B, T]."""
        texts = [t.lower() for t in texts] if self.lowercase_input else list(texts)
        return self.tokenizer(
            texts, max_length=self.max_seq_length, truncation=True, padding=True, return_tensors="pt"
        )

    def encoder(self) -> SentenceEncoder:
        """An inference view sharing these weights (``encode`` puts the model in eval mode; callers that
        train afterwards switch back with ``.train()``)."""
        enc = SentenceEncoder(
            self.bert, self.tokenizer, self.pooling, self.normalize, self.max_seq_length, self.lowercase_input
        )
        enc.dense = list(self.dense)
        return enc

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        was = self.training
        try:
            return self.encoder().encode(list(texts), batch_size=batch_size, show_progress=show_progress)
        finally:
            self.train(was)

    def save(self, out_dir: str | os.PathLike) -> Path:
        """Write the sentence-transformers folder (atomically: a temp dir renamed into place)."""
        out_dir = Path(out_dir)
        if out_dir.is_dir():  # replacing a saved model: its sub-folders cannot be renamed over
            shutil.rmtree(out_dir)
        with atomic_dir(out_dir) as tmp:
            self.bert.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            atomic_write_json(
                tmp / "sentence_bert_config.json",
                {"max_seq_length": self.max_seq_length, "do_lower_case": self.lowercase_input},
            )
            modules = [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
            hidden = self.bert.config.hidden_size
            pooling_cfg = {"word_embedding_dimension": hidden}
            for mode, key in _ST_POOLING.items():
                pooling_cfg[key] = mode == self.pooling
            pooling_cfg["pooling_mode_mean_sqrt_len_tokens"] = self.pooling == "mean_sqrt_len"
            atomic_write_json(tmp / "1_Pooling" / "config.json", pooling_cfg)
            for d in self.dense:
                i = len(modules)
                d.save(tmp / f"{i}_Dense")
                modules.append(
                    {
                        "idx": i,
                        "name": str(i),
                        "path": f"{i}_Dense",
                        "type": "sentence_transformers.models.Dense",
                    }
                )
            if self.normalize:
                i = len(modules)
                (tmp / f"{i}_Normalize").mkdir()
                modules.append(
                    {
                        "idx": i,
                        "name": str(i),
                        "path": f"{i}_Normalize",
                        "type": "sentence_transformers.models.Normalize",
                    }
                )
            atomic_write_json(tmp / "modules.json", modules)
            # the similarity sentence-transformers reports with model.similarity()
            atomic_write_json(tmp / "config_sentence_transformers.json", {"similarity_fn_name": "cosine"})
        return out_dir


def read_modules(model_dir: str | os.PathLike) -> list[str]:
    """The module kinds of a saved folder, in order (for tests and reports)."""
    return [m["type"].rsplit(".", 1)[-1] for m in json.loads((Path(model_dir) / "modules.json").read_text())]
