"""The model behind the server, usable without HTTP: load a dir (precision, int8 copies), tokenise, and run
sequences through the batcher. The routes' own model calls live in ``serving.routes``; the ones several
routes share (sentence vectors, classifier logits) are here.

Every public method takes already-parsed Python values, checks them against ``Limits`` before any
tokenisation (``ApiError`` names the field or limit), and returns numpy arrays or JSON-able values.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import UserError
from ..inference_precision import check_inference_precision, inference_autocast
from ..sentence.batching import pad
from .batching import Batcher
from .errors import ApiError, validation
from .limits import Limits, check_budget, check_text, check_texts, truncated_tokens, windowed_tokens
from .pairs import encode_pairs

LONG_TEXT = ("truncate", "windows")
TRUNCATION_DIRECTIONS = ("right", "left")


class InferenceService:
    """A model dir ready to serve.

    Args:
        limits: what one request may cost (``Limits``); ``max_batch_size`` overrides its field.
        max_length: tokens per sequence, kept as ``max_seq_length`` (default and ceiling: the model's
            ``max_position_embeddings``; the name is ``bertkit serve --max-length``'s).
        batching: keyword arguments of ``Batcher`` (max_batch_tokens, max_wait_ms, workers, enabled).
        long_text: ``"truncate"`` or ``"windows"`` (default policy for embed / predict).
        window_stride: tokens between window starts (default half of ``max_length``).
        model_id: the name reported by /info and /v1/embeddings (default: the dir's name).
        int8: run the batched model calls on dynamically quantised int8 copies (CPU).
        int8_engine: the int8 GEMM the weights are packed for (``quantize.choose_engine``; default auto).
        precision: fp32 (default), bf16 autocast, or auto: bf16 where this machine runs it faster and its
            outputs agree with fp32's (``bertkit.inference_precision``; measured once, at start-up).
        on_batch: ``(task, sequences, padded tokens)`` callback after each model batch (metrics).
        auto_truncate: what a TEI-shaped request that does not say ``truncate`` gets, as TEI's
            ``--auto-truncate``: False (TEI's default) refuses an input over ``max_seq_length`` tokens with
            413, True cuts it.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike,
        limits: Limits | None = None,
        max_length: int | None = None,
        device: str | None = None,
        batching: dict[str, Any] | None = None,
        long_text: str = "truncate",
        window_stride: int | None = None,
        model_id: str | None = None,
        int8: bool = False,
        int8_engine: str = "auto",
        on_batch: Any = None,
        max_batch_size: int | None = None,
        precision: str = "fp32",
        auto_truncate: bool = False,
    ) -> None:
        from ..architectures import encoder_of, load_config, model_class
        from ..sentence.encoder import SentenceEncoder
        from ..tokenizer import Tokenizer

        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise UserError(f"{self.model_dir}: model directory not found")
        check_inference_precision(precision)
        if int8 and precision != "fp32":
            raise UserError(f"--int8 and --precision {precision} exclude each other: choose one")
        limits = limits or Limits()
        if max_batch_size is not None:
            limits = Limits(**{**limits.to_dict(), "max_batch_size": max_batch_size})
        self.limits = limits
        if long_text not in LONG_TEXT:
            raise UserError(f"--long-text must be one of {', '.join(LONG_TEXT)}, got {long_text!r}")
        self.long_text = long_text
        self.auto_truncate = auto_truncate
        self.model_id = model_id or self.model_dir.resolve().name
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tok_lock = threading.Lock()  # the tokenizer's truncation settings are shared state
        if (self.model_dir / "modules.json").is_file():  # a sentence-transformers folder
            self.encoder = SentenceEncoder.from_pretrained(
                self.model_dir, device=self.device, precision=precision
            )
            self.model = self.encoder.model
            self.tokenizer = self.encoder.tokenizer
            self.architecture = "SentenceTransformer"
        else:
            config = load_config(self.model_dir)  # BERT's or ModernBERT's, by the folder's model_type
            cls = model_class((config.architectures or [""])[0], self.model_dir)
            self.model = cls.from_pretrained(self.model_dir).to(self.device).eval()
            self.tokenizer = Tokenizer.from_pretrained(self.model_dir)
            self.encoder = SentenceEncoder(
                encoder_of(self.model),
                self.tokenizer,
                pooling="mean",
                max_seq_length=max_length,
                precision=precision,
            )
            self.architecture = type(self.model).__name__
        self.config = self.model.config
        self.precision = self.encoder.precision_in_use  # "auto" is measured now, not on the first request
        self.int8 = int8
        self._int8_encoder = self._int8_head = None
        self.int8_engine: str | None = None
        if int8:  # int8 copies for the batched model calls (fill-mask keeps the float model)
            from .quantize import int8_static

            if self.device != "cpu":
                raise UserError("--int8 runs on the CPU only (dynamic quantisation); drop --device")
            self._int8_encoder = int8_static(self.encoder.model, int8_engine)
            self.int8_engine = self._int8_encoder.int8_engine
            if self.model is not self.encoder.model:  # a task head: its own int8 copy
                self._int8_head = int8_static(self.model, int8_engine)
        limit = self.config.max_tokens
        self.max_seq_length = min(max_length or limit, limit)
        self.encoder.max_seq_length = min(self.encoder.max_seq_length, self.max_seq_length)
        if self.architecture == "SentenceTransformer":
            # the folder's own max_seq_length is the one limit: /info reports it, truncation cuts there
            # and truncate: false refuses past it
            self.max_seq_length = self.encoder.max_seq_length
        self.window_stride = window_stride or max(self.max_seq_length // 2, 1)
        if not 0 < self.window_stride:
            raise UserError(f"--window-stride must be >= 1, got {window_stride}")
        self.batcher = Batcher(self._run, on_batch=on_batch, **(batching or {}))

    def close(self) -> None:
        self.batcher.close()

    # ------------------------------------------------------------ capabilities
    @property
    def cross_encoder(self) -> bool:
        """A one-output sequence classifier scores (query, text) pairs jointly; others rank by cosine."""
        return self.head == "ForSequenceClassification" and self.config.num_labels == 1

    @property
    def head(self) -> str:
        """The task head the architecture names, without its "Bert" / "ModernBert" prefix
        ("ForSequenceClassification", ...; "Model" for a bare encoder)."""
        from ..architectures import head_of

        return head_of(self.architecture)

    def labels(self) -> list[str]:
        """One name per output of the head (``LABEL_i`` where the config names none)."""
        names = self.config.id2label or {}
        return [names.get(i, f"LABEL_{i}") for i in range(self.config.num_labels)]

    def info(self) -> dict[str, Any]:
        c = self.config
        out: dict[str, Any] = {
            "model_id": self.model_id,  # the dir's name only: no filesystem path leaves the server
            "architecture": self.architecture,
            "hidden_size": c.hidden_size,
            "num_hidden_layers": c.num_hidden_layers,
            "vocab_size": c.vocab_size,
            "max_length": self.max_seq_length,
            "max_input_length": self.max_seq_length,  # TEI's name for the same limit
            "max_batch_size": self.limits.max_batch_size,
            "limits": self.limits.to_dict(),
            "long_text": self.long_text,
            "auto_truncate": self.auto_truncate,  # TEI's name: what an omitted truncate means
            "pooling": self.encoder.pooling,
            "normalize": self.encoder.normalize,
            "prompts": self.encoder.prompts.prompts,
            "default_prompt_name": self.encoder.prompts.default_name,
            "rerank": "cross-encoder" if self.cross_encoder else "cosine",
            "precision": self.precision,
            "int8": self.int8,
            "int8_engine": self.int8_engine,
            "device": str(self.device),
        }
        if self.head in ("ForSequenceClassification", "ForTokenClassification"):
            out["labels"] = self.labels()
            out["num_labels"] = c.num_labels
        return out

    # ------------------------------------------------------------ the model call (batcher side)
    @torch.inference_mode()
    def _run(self, task: str, ids: list[list[int]], type_ids: list[list[int]]) -> list[Any]:
        t_ids, mask, t_types = (t.to(self.device) for t in pad(ids, self.tokenizer.pad_token_id, type_ids))
        if task in ("embed", "hidden"):
            if self.int8:
                # by keyword: the encoders' third positional argument differs (BERT: type ids, ModernBERT:
                # positions)
                hidden = self._int8_encoder(t_ids, attention_mask=mask, token_type_ids=t_types)[0]
            else:
                hidden = self.encoder.hidden_states(t_ids, mask)
            if task == "embed":
                return list(self.encoder.sentence_vectors(hidden, mask).cpu().numpy())
            hidden = hidden.float().cpu().numpy()
            return [hidden[i, : len(x)] for i, x in enumerate(ids)]
        # the int8 copy runs in fp32 (--int8 excludes --precision), where the autocast is a no-op
        with inference_autocast(self.precision, t_ids.device):
            model = self._int8_head if self.int8 else self.model
            out = model(t_ids, attention_mask=mask, token_type_ids=t_types)
        # out[0]: the logits (a span head's start logits; out[1] its end logits)
        first = out[0].float().cpu().numpy()
        if task == "classify":
            return list(first)
        if task == "tokens":
            return [first[i, : len(x)] for i, x in enumerate(ids)]
        if task == "span":
            end = out[1].float().cpu().numpy()
            return [(first[i, : len(x)], end[i, : len(x)]) for i, x in enumerate(ids)]
        raise ValueError(f"unknown task {task!r}")

    # ------------------------------------------------------------ tokenisation
    def _windows(self, ids: list[int]) -> list[list[int]]:
        """[CLS] w [SEP] windows of at most max_seq_length tokens over ``ids`` (no specials), advancing by the
        stride."""
        room = self.max_seq_length - 2
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        if len(ids) <= room:
            return [[cls_id, *ids, sep_id]]
        out, start = [], 0
        stride = min(self.window_stride, room)
        while True:
            out.append([cls_id, *ids[start : start + room], sep_id])
            if start + room >= len(ids):
                return out
            start += stride

    def budget(self, texts: list[str], pairs: list[str] | None, long_text: str) -> int:
        """Upper bound on the tokens the model runs for ``texts`` (from their lengths, before tokenising)."""
        if long_text == "windows":
            return sum(windowed_tokens(len(t), 2, self.max_seq_length, self.window_stride) for t in texts)
        extra = [len(p) + 1 for p in pairs] if pairs is not None else [0] * len(texts)
        return sum(truncated_tokens(len(t) + e, self.max_seq_length) for t, e in zip(texts, extra))

    def encode(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        long_text: str | None = None,
        for_embedding: bool = False,
        truncate: bool = True,
        truncation_direction: str = "right",
        field: str | list[str] = "inputs",
    ) -> tuple[list[list[int]], list[list[int]], list[int]]:
        """Sequences for the model: (ids, type_ids, owner) where ``owner[k]`` is the text of sequence k.

        ``long_text="windows"`` gives a long text several windows (single texts only); ``truncate=False``
        refuses a text over ``max_seq_length`` tokens instead of cutting it; ``truncation_direction="left"``
        keeps a long embedding text's last tokens instead of its first. ``field``: as :meth:`_refuse_long`.
        """
        direction = truncation_direction.lower()
        if direction not in TRUNCATION_DIRECTIONS:
            raise validation(f"truncation_direction must be Right or Left, got {truncation_direction!r}")
        long_text = long_text or self.long_text
        if long_text not in LONG_TEXT:
            raise validation(f"long_text must be one of {', '.join(LONG_TEXT)}, got {long_text!r}")
        if long_text == "windows" and pairs is not None:
            raise validation(
                "long_text 'windows' is for single texts; pairs are truncated (send long_text 'truncate')"
            )
        check_budget(self.budget(texts, pairs, long_text), self.limits)
        with self.tok_lock:
            if long_text == "windows":
                if for_embedding and self.encoder.lowercase_input:
                    texts = [t.lower() for t in texts]
                pieces = self.tokenizer.encode_batch_ids(texts, add_special_tokens=False)
                ids, owner = [], []
                for i, p in enumerate(pieces):
                    for w in self._windows(p):
                        ids.append(w)
                        owner.append(i)
                return ids, [[0] * len(x) for x in ids], owner
            if for_embedding and truncate and direction == "left":
                ids = self._left_truncated(texts)
                types = [[0] * len(x) for x in ids]
            elif for_embedding:
                ids = self.encoder.tokenize(texts) if truncate else self._untruncated(texts)
                types = [[0] * len(x) for x in ids]
            elif pairs is not None:  # linear in the texts' length, unlike the library's pair truncation
                # untruncated (no length bound) when truncation is off: the check below refuses
                ids, types = encode_pairs(
                    self.tokenizer, texts, pairs, self.max_seq_length if truncate else sys.maxsize
                )
            else:
                enc = self.tokenizer(
                    texts,
                    max_length=self.max_seq_length if truncate else None,
                    truncation=truncate,
                    padding=False,
                    return_tensors=None,
                )
                ids, types = enc["input_ids"], enc["token_type_ids"]
        if not truncate:
            self._refuse_long(ids, field)
        return ids, types, list(range(len(ids)))

    def resolve_truncate(self, truncate: bool | None) -> bool:
        """A request's ``truncate``; when it says nothing, the server's ``--auto-truncate`` (TEI's rule)."""
        return self.auto_truncate if truncate is None else truncate

    def _refuse_long(self, ids: list[list[int]], field: str | list[str]) -> None:
        """413 for the first sequence over ``max_seq_length`` tokens, as TEI refuses it (a validation error).

        ``field``: the request field holding the texts (``inputs`` -> ``inputs[i]``), or one name per
        sequence when they come from several fields (``/rerank``'s query and texts)."""
        for i, x in enumerate(ids):
            if len(x) > self.max_seq_length:
                name = field[i] if isinstance(field, list) else f"{field}[{i}]"
                # OpenAI's request has no truncate field; TEI's routes do
                ask = "" if name.startswith("input[") else "send truncate: true or "
                raise ApiError(
                    413,
                    "validation",
                    f"{name} is {len(x)} tokens long; this model takes at most {self.max_seq_length} "
                    f"(GET /info: max_input_length); to cut it, {ask}start the server with --auto-truncate",
                    name,
                )

    def _untruncated(self, texts: list[str]) -> list[list[int]]:
        if self.encoder.lowercase_input:
            texts = [t.lower() for t in texts]
        enc = self.tokenizer(texts, max_length=None, truncation=False, padding=False, return_tensors=None)
        return enc["input_ids"]

    def _left_truncated(self, texts: list[str]) -> list[list[int]]:
        """[CLS] t [SEP] keeping each text's last ``max_seq_length - 2`` tokens."""
        if self.encoder.lowercase_input:
            texts = [t.lower() for t in texts]
        room = self.max_seq_length - 2
        pieces = self.tokenizer.encode_batch_ids(texts, add_special_tokens=False)
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        return [[cls_id, *p[max(len(p) - room, 0) :], sep_id] for p in pieces]

    @staticmethod
    def _combine(outputs: list[Any], owner: list[int], n: int) -> list[np.ndarray]:
        """Mean of each text's window outputs (one window: the output itself)."""
        sums: list[Any] = [None] * n
        counts = [0] * n
        for out, i in zip(outputs, owner):
            sums[i] = out.astype(np.float64) if sums[i] is None else sums[i] + out
            counts[i] += 1
        return [(s / c).astype(np.float32) for s, c in zip(sums, counts)]

    # ------------------------------------------------------------ the model calls routes share
    def embed(
        self,
        texts: list[str],
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool = True,
        long_text: str | None = None,
        field: str = "texts",
        truncation_direction: str = "right",
        prompt_name: str | None = None,
    ) -> tuple[np.ndarray, int]:
        """float32 [N, D] vectors and the number of tokens run.

        ``normalize``: None keeps the model's own setting (a Normalize module), True / False force unit
        or raw vectors. ``prompt_name``: one of the folder's prompts, prepended to every text (None: the
        folder's default prompt, if it names one)."""
        check_texts(texts, field, self.limits)
        if prompt_name is not None:
            check_text(prompt_name, "prompt_name", self.limits)
        texts = self.encoder.prompts.apply(texts, prompt_name)
        return self.embed_checked(
            texts, normalize, dimensions, truncate, long_text, field, truncation_direction
        )

    def embed_checked(
        self,
        texts: list[str],
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool = True,
        long_text: str | None = None,
        field: str | list[str] = "texts",
        truncation_direction: str = "right",
    ) -> tuple[np.ndarray, int]:
        """:meth:`embed` of texts the caller has already checked against the limits (``field``: as
        :meth:`_refuse_long`)."""
        self.check_dimensions(dimensions)
        ids, _, owner = self.encode(
            texts,
            long_text=long_text,
            for_embedding=True,
            truncate=truncate,
            truncation_direction=truncation_direction,
            field=field,
        )
        return self.vectors(ids, owner, len(texts), normalize, dimensions)

    def cosines(
        self,
        texts: list[str],
        truncate: bool = True,
        field: str | list[str] = "texts",
        truncation_direction: str = "right",
    ) -> list[float]:
        """Cosine similarity of each of ``texts[1:]`` with ``texts[0]`` (texts already checked, one by one,
        against the limits; the request's token budget is checked here). ``truncate=False`` refuses a
        text over ``max_seq_length`` tokens (``field``: as :meth:`_refuse_long`)."""
        check_budget(self.budget(texts, None, self.long_text), self.limits)
        vecs, _ = self.embed_checked(
            texts,
            normalize=True,
            truncate=truncate,
            field=field,
            truncation_direction=truncation_direction,
        )
        return [float(s) for s in vecs[1:] @ vecs[0]]

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is not None and not 1 <= dimensions <= self.encoder.dim:
            raise validation(
                f"dimensions must be in 1..{self.encoder.dim} for this model, got {dimensions}", "dimensions"
            )

    def vectors(
        self,
        ids: list[list[int]],
        owner: list[int],
        n: int,
        normalize: bool | None,
        dimensions: int | None,
    ) -> tuple[np.ndarray, int]:
        """Run ``ids`` (``owner[k]``: the text of sequence k) through the batcher: [n, D] vectors (mean over each text's windows) and the tokens."""
        vecs = np.stack(self._combine(self.batcher.submit("embed", ids), owner, n))
        if dimensions is not None:
            vecs = vecs[:, :dimensions]
        if self.encoder.normalize if normalize is None else normalize:
            vecs = F.normalize(torch.from_numpy(vecs), p=2, dim=1).numpy()
        return vecs, sum(len(x) for x in ids)

    def classify_logits(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        long_text: str | None = None,
        field: str | list[str] = "texts",
        truncate: bool = True,
    ) -> np.ndarray:
        """float32 [N, num_labels] logits of a sequence classifier (a text's windows averaged);
        ``truncate=False`` refuses a text (or pair) over ``max_seq_length`` tokens (``field``: as
        :meth:`_refuse_long`)."""
        check_texts(texts, field if isinstance(field, str) else "texts", self.limits)
        if pairs is not None:
            if len(pairs) != len(texts):
                raise validation(
                    f"pairs has {len(pairs)} entries but texts has {len(texts)}; give one pair per text"
                )
            check_texts(pairs, "pairs", self.limits)
        ids, types, owner = self.encode(texts, pairs, long_text=long_text, truncate=truncate, field=field)
        return np.stack(self._combine(self.batcher.submit("classify", ids, types), owner, len(texts)))


__all__ = ["LONG_TEXT", "InferenceService"]
