"""The sentence encoder: encoder -> pooling -> Dense modules -> optional L2 normalisation. One module both
encodes (``encode``: texts -> vectors) and trains (``forward`` on padded batches, ``save`` as a
sentence-transformers folder).

``from_pretrained`` reads a sentence-transformers folder (:mod:`.folder`) or a plain BERT directory in the
Hugging Face layout (mean pooling unless asked otherwise). The encoder is the folder's architecture
(:mod:`bertkit.architectures`): BERT, or ModernBERT.

Encoding sorts the texts by token length so each batch carries little padding, then restores the
caller's order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import UserError
from ..inference_precision import check_inference_precision, inference_autocast, resolve_inference_precision
from ..pooling import POOLING_MODES, pool
from ..prompts import Prompts
from .batching import length_batches, pad, predicting
from .dense import TANH, Dense


class SentenceEncoder(nn.Module):
    """``forward(input_ids [B, T], attention_mask [B, T]) -> [B, dim]`` sentence vectors; ``encode`` for texts.

    Built in eval mode (inference); a trainer switches it to train mode. ``dense`` runs after pooling, before
    normalisation; ``precision`` (fp32, bf16 or auto, :mod:`bertkit.inference_precision`) applies to
    ``encode``; ``prompts`` are the folder's named prompts (query: / passage: ...)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        pooling: str = "mean",
        normalize: bool = False,
        max_seq_length: int | None = None,
        lowercase_input: bool = False,
        dense: Sequence[Dense] = (),
        precision: str = "fp32",
        prompts: Prompts | None = None,
    ) -> None:
        super().__init__()
        check_inference_precision(precision)
        if pooling not in POOLING_MODES:
            raise UserError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING_MODES)}")
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.normalize = normalize
        limit = model.config.max_tokens
        self.max_seq_length = min(max_seq_length or limit, limit)
        self.lowercase_input = lowercase_input
        self.dense = nn.ModuleList(d.to(model.device) for d in dense)
        self.prompts = prompts or Prompts()
        self.precision = precision
        self._precision_run: str | None = None  # what "auto" resolved to, at the first encode
        self.eval()

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_seq_length: int | None = None,
        device: str | torch.device | None = None,
        precision: str = "fp32",
        dense_dim: int | None = None,
        dense_activation: str = TANH,
        seed: int = 0,
    ) -> SentenceEncoder:
        """Load a sentence-transformers folder or a plain BERT (or ModernBERT) dir.

        ``pooling`` / ``normalize`` / ``max_seq_length`` override what the folder says; ``dense_dim`` appends
        a new Dense layer (initialised from ``seed``) on top of whatever the folder has, to train it."""
        from ..architectures import load_encoder
        from ..tokenizer import Tokenizer
        from .folder import Layout, read_layout

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise UserError(f"{model_dir}: model directory not found")
        st_folder = (model_dir / "modules.json").is_file()
        layout = read_layout(model_dir) if st_folder else Layout(model_dir)
        model = load_encoder(layout.transformer_dir)
        if device is not None:
            model.to(device)
        tokenizer = Tokenizer.from_pretrained(layout.transformer_dir)
        dense = list(layout.dense)
        if dense_dim:
            width = dense[-1].out_features if dense else model.config.hidden_size
            dense.append(Dense.seeded(width, dense_dim, dense_activation, seed))
        return cls(
            model,
            tokenizer,
            pooling=pooling or layout.pooling or "mean",
            normalize=layout.normalize if normalize is None else normalize,
            max_seq_length=max_seq_length
            or layout.config.get("max_seq_length")
            # sentence-transformers >= 5 saves its limit as the tokenizer's model_max_length instead
            or (tokenizer.model_max_length if st_folder else None),
            lowercase_input=bool(layout.config.get("do_lower_case", False)),
            dense=dense,
            precision=precision,
            prompts=Prompts.from_folder(model_dir, include_prompt=layout.include_prompt),
        )

    def save(self, out_dir: str | os.PathLike) -> Path:
        """Write the sentence-transformers folder (:func:`.folder.write_folder`)."""
        from .folder import write_folder

        return write_folder(self, out_dir)

    @property
    def dim(self) -> int:
        return self.dense[-1].out_features if len(self.dense) else self.model.config.hidden_size

    @property
    def precision_in_use(self) -> str:
        """The precision ``encode`` runs in: "fp32" or "bf16" ("auto" is measured here, once)."""
        if self._precision_run is None:
            self._precision_run = resolve_inference_precision(self.precision, self.model)
        return self._precision_run

    def hidden_states(self, input_ids: Tensor, mask: Tensor) -> Tensor:
        """Last hidden states [B, T, H] (fp32) of a padded batch [B, T], in ``precision_in_use``."""
        with inference_autocast(self.precision_in_use, input_ids.device):
            return self.model(input_ids, attention_mask=mask).last_hidden_state.float()

    def sentence_vectors(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """Token states [B, T, H] and mask [B, T] -> sentence vectors [B, dim]: pooling, then the Dense
        modules (normalisation is left to the caller, who may ask for it per request)."""
        vec = pool(hidden.float(), mask, self.pooling)
        for d in self.dense:
            vec = d(vec)
        return vec

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Sentence vectors [B, dim] of a padded batch [B, T], normalised when the model normalises."""
        hidden = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        vec = self.sentence_vectors(hidden.last_hidden_state, attention_mask)
        return F.normalize(vec, dim=-1) if self.normalize else vec

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids (with [CLS]/[SEP]) of each text, truncated to ``max_seq_length``."""
        return self._tokenize(texts, padding=False, return_tensors=None)["input_ids"]

    def tokenize_batch(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Padded training batch tensors (``input_ids``, ``attention_mask``, ``token_type_ids``) [B, T]."""
        return self._tokenize(texts, padding=True, return_tensors="pt")

    def _tokenize(self, texts: Sequence[str], **kwargs: Any) -> Any:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str, not a single str")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
        texts = [t.lower() for t in texts] if self.lowercase_input else texts
        return self.tokenizer(texts, max_length=self.max_seq_length, truncation=True, **kwargs)

    def encode(
        self,
        texts: Sequence[str] | str,
        batch_size: int = 32,
        normalize: bool = False,
        show_progress: bool = False,
        convert_to_numpy: bool = True,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> np.ndarray:
        """Texts -> float32 array [N, dim] (a single str gives [dim]), in eval mode (the training flag is
        restored afterwards).

        ``normalize=True`` (or a Normalize module in the folder) returns unit vectors, whose dot
        products are cosine similarities. ``prompt_name`` (one of the folder's prompts) or ``prompt`` (a
        text) is prepended to every text; with neither, the folder's ``default_prompt_name`` applies.
        """
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        if all(isinstance(t, str) for t in batch):  # tokenize() names a non-text
            batch = self.prompts.apply(batch, prompt_name, prompt)
        ids = self.tokenize(batch)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        if not ids:
            return out[0] if single else out
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batches = length_batches(ids, batch_size)
        if show_progress:
            from tqdm import tqdm

            batches = tqdm(batches, desc="encode", unit="batch")
        with predicting(self):
            for idx in batches:
                input_ids, mask, _ = pad([ids[i] for i in idx], self.tokenizer.pad_token_id)
                input_ids, mask = input_ids.to(self.model.device), mask.to(self.model.device)
                vec = self.sentence_vectors(self.hidden_states(input_ids, mask), mask)
                if normalize or self.normalize:
                    vec = F.normalize(vec, p=2, dim=1)
                out[idx] = vec.cpu().numpy()
        return out[0] if single else out


def similarity(a: np.ndarray | Tensor, b: np.ndarray | Tensor) -> np.ndarray:
    """Cosine similarity: [N, H] x [M, H] -> [N, M] (1-D inputs are treated as one row each)."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float32))
    b = np.atleast_2d(np.asarray(b, dtype=np.float32))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"dimension mismatch: {a.shape[1]} vs {b.shape[1]}")
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def rank_corpus(
    encoder: Any, queries: Sequence[str], corpus: Sequence[str], k: int = 100, batch_size: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """(scores [Q, k], corpus positions [Q, k]) of each query's top ``k`` by cosine similarity."""
    from ..index import exact_search

    docs = encoder.encode(list(corpus), batch_size=batch_size, show_progress=True)
    q = encoder.encode(list(queries), batch_size=batch_size, show_progress=True)
    docs /= np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    return exact_search(docs, q, min(k, len(corpus)))
