"""Sentence embeddings, similarity, an exact dense index and cross-encoder re-ranking.

``SentenceEncoder`` reads two kinds of directories:

- a sentence-transformers folder (``modules.json`` naming a Transformer module, a ``Pooling`` module
  whose ``config.json`` says which pooling, and optionally a ``Normalize`` module;
  ``sentence_bert_config.json`` gives ``max_seq_length``, or, in folders sentence-transformers >= 5 saved, the
  tokenizer's ``model_max_length``), without sentence-transformers installed;
- a plain BERT directory in the Hugging Face layout (mean pooling unless asked otherwise).

The encoder is the folder's architecture (:mod:`bertkit.architectures`): BERT, or ModernBERT.

Encoding sorts the texts by token length so each batch carries little padding, then restores the
caller's order.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import UserError
from .inference_precision import check_inference_precision, inference_autocast, resolve_inference_precision
from .io import atomic_write, path_inside
from .pooling import POOLING_MODES, pool
from .prompts import Prompts

logger = logging.getLogger("bertkit")

# Keys of a sentence-transformers Pooling config.json -> our pooling names (first true one wins).
_ST_POOLING_KEYS = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
    ("pooling_mode_mean_tokens", "mean"),
)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None


# sentence-transformers' names of the activations a Dense module may use (nothing else is imported by name)
DENSE_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": torch.nn.Tanh,
    "torch.nn.modules.linear.Identity": torch.nn.Identity,
    "torch.nn.modules.activation.ReLU": torch.nn.ReLU,
    "torch.nn.modules.activation.GELU": torch.nn.GELU,
    "torch.nn.modules.activation.Sigmoid": torch.nn.Sigmoid,
}


class Dense(torch.nn.Module):
    """sentence-transformers' ``Dense`` module: ``activation(linear(x))``, [B, in] -> [B, out].

    Saved as ``config.json`` (``in_features``, ``out_features``, ``bias``, ``activation_function``) and
    ``model.safetensors`` (``linear.weight`` [out, in], ``linear.bias`` [out]), as sentence-transformers does."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        activation: str = "torch.nn.modules.activation.Tanh",
    ) -> None:
        super().__init__()
        if activation not in DENSE_ACTIVATIONS:
            raise UserError(
                f"Dense activation {activation!r} is not supported (supported: {', '.join(DENSE_ACTIVATIONS)})"
            )
        self.in_features, self.out_features, self.bias, self.activation = (
            in_features,
            out_features,
            bias,
            activation,
        )
        self.linear = torch.nn.Linear(in_features, out_features, bias=bias)
        self.activation_function = DENSE_ACTIVATIONS[activation]()

    def forward(self, x: Tensor) -> Tensor:
        return self.activation_function(self.linear(x))

    def save(self, path: str | os.PathLike) -> None:

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "activation_function": self.activation,
        }
        with atomic_write(path / "config.json") as f:
            json.dump(cfg, f, indent=2)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        with atomic_write(path / "model.safetensors", "wb") as f:
            f.write(_safetensors_bytes(tensors))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Dense:
        """Read a Dense folder (safetensors only: a pickled ``pytorch_model.bin`` is refused)."""
        from safetensors.torch import load_file

        path = Path(path)
        cfg = _read_json(path / "config.json") if (path / "config.json").is_file() else None
        if not isinstance(cfg, dict) or not {"in_features", "out_features"} <= set(cfg):
            raise UserError(f"{path / 'config.json'}: a Dense module needs in_features and out_features")
        if cfg.get("use_residual"):
            raise UserError(
                f"{path / 'config.json'}: a residual Dense module (use_residual) is not supported"
            )
        if not (path / "model.safetensors").is_file():
            raise UserError(
                f"{path}: Dense weights must be in model.safetensors (bertkit does not unpickle "
                "pytorch_model.bin; re-save the model with a recent sentence-transformers)"
            )
        dense = cls(
            int(cfg["in_features"]),
            int(cfg["out_features"]),
            bool(cfg.get("bias", True)),
            cfg.get("activation_function", "torch.nn.modules.activation.Tanh"),
        )
        state = load_file(str(path / "model.safetensors"))
        try:
            dense.load_state_dict(state)
        except RuntimeError as e:
            raise UserError(f"{path / 'model.safetensors'}: weights do not match config.json ({e})") from None
        return dense


def _safetensors_bytes(tensors: dict[str, Tensor]) -> bytes:
    from safetensors.torch import save

    return save(tensors)


def _sentence_transformers_layout(
    model_dir: Path,
) -> tuple[Path, str | None, bool, dict[str, Any], list[Dense], bool]:
    """(transformer dir, pooling mode or None, normalize, sentence_bert_config, Dense modules, whether
    pooling includes a prompt's tokens) of an ST folder."""
    modules = _read_json(model_dir / "modules.json")
    if not isinstance(modules, list):
        raise UserError(f"{model_dir / 'modules.json'}: expected a list of modules")
    transformer_dir, mode, normalize, include_prompt = model_dir, None, False, True
    dense: list[Dense] = []
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = path_inside(model_dir, module.get("path", ""), str(model_dir / "modules.json"))
        if kind == "Transformer":
            transformer_dir = path
        elif kind == "Pooling":
            cfg_file = path / "config.json"
            if cfg_file.is_file():
                cfg = _read_json(cfg_file)
                include_prompt = cfg.get("include_prompt", True) is not False
                for key, name in _ST_POOLING_KEYS:
                    if cfg.get(key):
                        mode = name
                        break
                # sentence-transformers >= 6 writes one "pooling_mode" (a name or a list of names)
                new = cfg.get("pooling_mode")
                new = new[0] if isinstance(new, list) and len(new) == 1 else new
                if mode is None and isinstance(new, str):
                    mode = {"mean_sqrt_len_tokens": "mean_sqrt_len"}.get(new, new)
                    if mode not in POOLING_MODES:
                        mode = None
                if mode is None:
                    raise UserError(f"{cfg_file}: no supported pooling mode set (supported: {POOLING_MODES})")
        elif kind == "Normalize":
            normalize = True
        elif kind == "Dense":
            if not path.resolve().is_relative_to(model_dir.resolve()):
                raise UserError(
                    f"{model_dir / 'modules.json'}: module path {module.get('path')!r} leaves the folder"
                )
            dense.append(Dense.load(path))
        else:
            raise UserError(
                f"{model_dir / 'modules.json'}: module type {module.get('type')!r} is not supported "
                "(bertkit reads Transformer, Pooling, Dense and Normalize modules)"
            )
    st_cfg: dict[str, Any] = {}
    for candidate in (transformer_dir, model_dir):
        if (candidate / "sentence_bert_config.json").is_file():
            st_cfg = _read_json(candidate / "sentence_bert_config.json")
            break
    return transformer_dir, mode, normalize, st_cfg, dense, include_prompt


class SentenceEncoder:
    """A BERT encoder plus pooling (and optional L2 normalisation) -> one vector per text."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        pooling: str = "mean",
        normalize: bool = False,
        max_seq_length: int | None = None,
        lowercase_input: bool = False,
        dense: Sequence[Dense] = (),
        precision: str = "fp32",
        prompts: Prompts | None = None,
    ) -> None:
        check_inference_precision(precision)
        if pooling not in POOLING_MODES:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {POOLING_MODES}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.normalize = normalize
        limit = model.config.max_position_embeddings
        self.max_seq_length = min(max_seq_length or limit, limit)
        self.lowercase_input = lowercase_input
        self.dense = list(dense)  # applied after pooling, before normalisation
        self.prompts = prompts or Prompts()  # the folder's named prompts (query: / passage: ...)
        for d in self.dense:
            d.to(model.device).eval()
        self.precision = precision  # fp32, bf16 or auto (bertkit.inference_precision)
        self._precision_run: str | None = None  # what "auto" resolved to, at the first encode

    @property
    def precision_in_use(self) -> str:
        """The precision the encoder runs in: "fp32" or "bf16" ("auto" is measured here, once)."""
        if self._precision_run is None:
            self._precision_run = resolve_inference_precision(self.precision, self.model)
        return self._precision_run

    def hidden_states(self, input_ids: Tensor, mask: Tensor) -> Tensor:
        """Last hidden states [B, T, H] (fp32) of a padded batch [B, T], in ``precision_in_use``."""
        with inference_autocast(self.precision_in_use, input_ids.device):
            return self.model(input_ids, attention_mask=mask).last_hidden_state.float()

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_seq_length: int | None = None,
        device: str | torch.device | None = None,
        precision: str = "fp32",
    ) -> SentenceEncoder:
        """Load a sentence-transformers folder or a plain BERT (or ModernBERT) dir.

        ``pooling`` / ``normalize`` / ``max_seq_length`` override what the folder says; ``precision``:
        fp32, bf16 or auto (:mod:`bertkit.inference_precision`).
        """
        from .architectures import load_encoder
        from .tokenizer import Tokenizer

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise UserError(f"{model_dir}: model directory not found")
        st_mode, st_norm, st_cfg, dense, include_prompt = None, False, {}, [], True
        transformer_dir = model_dir
        sentence_transformers_folder = (model_dir / "modules.json").is_file()
        if sentence_transformers_folder:
            layout = _sentence_transformers_layout(model_dir)
            transformer_dir, st_mode, st_norm, st_cfg, dense, include_prompt = layout
        model = load_encoder(transformer_dir)
        if device is not None:
            model.to(device)
        tokenizer = Tokenizer.from_pretrained(transformer_dir)
        return cls(
            model,
            tokenizer,
            pooling=pooling or st_mode or "mean",
            normalize=st_norm if normalize is None else normalize,
            max_seq_length=max_seq_length
            or st_cfg.get("max_seq_length")
            # sentence-transformers >= 5 saves its limit as the tokenizer's model_max_length instead
            or (tokenizer.model_max_length if sentence_transformers_folder else None),
            lowercase_input=bool(st_cfg.get("do_lower_case", False)),
            dense=dense,
            precision=precision,
            prompts=Prompts.from_folder(model_dir, include_prompt=include_prompt),
        )

    @property
    def dim(self) -> int:
        return self.dense[-1].out_features if self.dense else self.model.config.hidden_size

    def sentence_vectors(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """Token states [B, T, H] and mask [B, T] -> sentence vectors [B, dim]: pooling, then the folder's
        Dense modules (normalisation is left to the caller, who may ask for it per request)."""
        vec = pool(hidden.float(), mask, self.pooling)
        for d in self.dense:
            vec = d(vec)
        return vec

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids (with [CLS]/[SEP]) of each text, truncated to ``max_seq_length``."""
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str, not a single str")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__}")
        if self.lowercase_input:
            texts = [t.lower() for t in texts]
        enc = self.tokenizer(
            texts, max_length=self.max_seq_length, truncation=True, padding=False, return_tensors=None
        )
        return enc["input_ids"]

    @torch.inference_mode()
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
        """Texts -> float32 array [N, H] (a single str gives [H]).

        ``normalize=True`` (or a Normalize module in the folder) returns unit vectors, whose dot
        products are cosine similarities. ``prompt_name`` (one of the folder's prompts) or ``prompt`` (a
        text) is prepended to every text; with neither, the folder's ``default_prompt_name`` applies.
        """
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        if all(isinstance(t, str) for t in batch):  # tokenize() names a non-text
            batch = self.prompts.apply(batch, prompt_name, prompt)
        ids = self.tokenize(batch)
        n = len(ids)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out[0] if single else out
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        order = sorted(range(n), key=lambda i: -len(ids[i]))  # longest first: memory peaks early
        device = self.model.device
        pad = self.tokenizer.pad_token_id
        batches = range(0, n, batch_size)
        if show_progress:
            from tqdm import tqdm

            batches = tqdm(batches, desc="encode", unit="batch")
        for start in batches:
            idx = order[start : start + batch_size]
            width = max(len(ids[i]) for i in idx)
            input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                mask[row, : len(ids[i])] = 1
            input_ids, mask = input_ids.to(device), mask.to(device)
            vec = self.sentence_vectors(self.hidden_states(input_ids, mask), mask)
            if normalize or self.normalize:
                vec = F.normalize(vec, p=2, dim=1)
            out[idx] = vec.cpu().numpy()
        return out[0] if single else out


# ------------------------------------------------------------------ similarity


def similarity(a: np.ndarray | Tensor, b: np.ndarray | Tensor) -> np.ndarray:
    """Cosine similarity: [N, H] x [M, H] -> [N, M] (1-D inputs are treated as one row each)."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float32))
    b = np.atleast_2d(np.asarray(b, dtype=np.float32))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"dimension mismatch: {a.shape[1]} vs {b.shape[1]}")
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


class DenseIndex:
    """Exact nearest-neighbour search over vectors (brute-force matrix product in numpy).

    ``metric="cosine"`` normalises stored and query vectors; ``"dot"`` uses raw inner products.
    Each vector may carry an id (any JSON value; default its position).
    """

    def __init__(self, dim: int, metric: str = "cosine") -> None:
        if metric not in ("cosine", "dot"):
            raise ValueError(f"metric must be 'cosine' or 'dot', got {metric!r}")
        self.dim = int(dim)
        self.metric = metric
        self._chunks: list[np.ndarray] = []
        self._matrix: np.ndarray | None = np.zeros((0, self.dim), dtype=np.float32)
        self.ids: list[Any] = []

    def __len__(self) -> int:
        return len(self.ids)

    def _prep(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(x, dtype=np.float32))
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected vectors of dimension {self.dim}, got shape {x.shape}")
        if self.metric == "cosine":
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return x

    @property
    def vectors(self) -> np.ndarray:
        if self._chunks:
            self._matrix = np.concatenate([self._matrix, *self._chunks])
            self._chunks = []
        return self._matrix

    def add(self, vectors: np.ndarray, ids: Sequence[Any] | None = None) -> None:
        x = self._prep(vectors)
        if ids is None:
            ids = list(range(len(self.ids), len(self.ids) + len(x)))
        elif len(ids) != len(x):
            raise ValueError(f"got {len(x)} vectors but {len(ids)} ids")
        self._chunks.append(x)
        self.ids.extend(ids)

    def search(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, list[list[Any]]]:
        """Top-``k`` per query: (scores [Q, k'], ids) best first, k' = min(k, len(index))."""
        q = self._prep(queries)
        mat = self.vectors
        k = min(k, len(mat))
        if k == 0:
            return np.zeros((len(q), 0), dtype=np.float32), [[] for _ in q]
        scores = q @ mat.T  # [Q, N]
        if k < len(mat):
            part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        else:
            part = np.tile(np.arange(len(mat)), (len(q), 1))
        part_scores = np.take_along_axis(scores, part, axis=1)
        order = np.argsort(-part_scores, axis=1, kind="stable")
        top = np.take_along_axis(part, order, axis=1)
        return np.take_along_axis(scores, top, axis=1), [[self.ids[j] for j in row] for row in top]

    def save(self, path: str | os.PathLike) -> None:
        """One ``.npz`` file: the vectors, the metric and the ids (as JSON)."""
        path = Path(path)
        with atomic_write(path, "wb") as f:
            np.savez(
                f,
                vectors=self.vectors,
                metric=np.array(self.metric),
                ids=np.array(json.dumps(self.ids)),
            )

    @classmethod
    def load(cls, path: str | os.PathLike) -> DenseIndex:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                vectors = data["vectors"]
                index = cls(vectors.shape[1], str(data["metric"]))
                index._matrix = vectors.astype(np.float32)
                index.ids = json.loads(str(data["ids"]))
        except (OSError, KeyError, ValueError) as e:
            raise UserError(f"{path}: not a bertkit DenseIndex file ({e})") from None
        return index


# --------------------------------------------------------------- re-ranking


class CrossEncoder:
    """Scores (query, document) pairs jointly with a BertForSequenceClassification head.

    With ``num_labels == 1`` the score is the raw logit (as sentence-transformers' CrossEncoder
    rankers); with more labels it is the logit of ``positive_label`` (default: the last).
    """

    def __init__(self, model: Any, tokenizer: Any, max_length: int = 512, positive_label: int = -1) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = min(max_length, model.config.max_position_embeddings)
        self.positive_label = positive_label

    @classmethod
    def from_pretrained(
        cls, model_dir: str | os.PathLike, max_length: int = 512, device: str | torch.device | None = None
    ) -> CrossEncoder:
        from .heads.finetune import BertForSequenceClassification
        from .tokenizer import Tokenizer

        model = BertForSequenceClassification.from_pretrained(model_dir)
        if device is not None:
            model.to(device)
        return cls(model, Tokenizer.from_pretrained(model_dir), max_length=max_length)

    @torch.inference_mode()
    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """Score each (a, b) pair -> float32 array [N]. Batches are formed by length."""
        pairs = list(pairs)
        scores = np.zeros(len(pairs), dtype=np.float32)
        if not pairs:
            return scores
        enc = self.tokenizer(
            [a for a, _ in pairs],
            [b for _, b in pairs],
            max_length=self.max_length,
            truncation="longest_first",
            padding=False,
            return_tensors=None,
        )
        ids, types = enc["input_ids"], enc["token_type_ids"]
        order = sorted(range(len(pairs)), key=lambda i: -len(ids[i]))
        device = self.model.device
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(ids[i]) for i in idx)
            t_ids = torch.full((len(idx), width), self.tokenizer.pad_token_id, dtype=torch.long)
            t_types = torch.zeros((len(idx), width), dtype=torch.long)
            t_mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                n = len(ids[i])
                t_ids[row, :n] = torch.tensor(ids[i])
                t_types[row, :n] = torch.tensor(types[i])
                t_mask[row, :n] = 1
            logits = self.model(
                t_ids.to(device), attention_mask=t_mask.to(device), token_type_ids=t_types.to(device)
            ).logits.float()
            col = 0 if logits.shape[1] == 1 else self.positive_label
            scores[idx] = logits[:, col].cpu().numpy()
        return scores

    def rerank(
        self, query: str, docs: Sequence[str], top_k: int | None = None, batch_size: int = 32
    ) -> list[tuple[int, float]]:
        """[(doc index, score)] sorted best first (ties keep the input order)."""
        scores = self.predict([(query, d) for d in docs], batch_size=batch_size)
        ranked = sorted(range(len(docs)), key=lambda i: -float(scores[i]))
        if top_k is not None:
            ranked = ranked[:top_k]
        return [(i, float(scores[i])) for i in ranked]


__all__ = ["CrossEncoder", "DenseIndex", "SentenceEncoder", "similarity"]
