"""The model behind the server, usable without HTTP: load a dir, check a request's limits, tokenise, hand
the sequences to the batcher, shape the outputs.

Every public method takes already-parsed Python values, checks them against ``Limits`` before any
tokenisation (``ApiError`` names the field or limit), and returns JSON-able values.
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
from .batching import Batcher
from .errors import ApiError, too_large, validation
from .limits import (
    Limits,
    check_budget,
    check_embed_all,
    check_fill_mask,
    check_text,
    check_texts,
    truncated_tokens,
    windowed_tokens,
)
from .pairs import encode_pairs

LONG_TEXT = ("truncate", "windows")
TRUNCATION_DIRECTIONS = ("right", "left")


class InferenceService:
    """A model dir ready to serve.

    Args:
        limits: what one request may cost (``Limits``); ``max_batch_size`` overrides its field.
        max_length: tokens per sequence (default and ceiling: the model's ``max_position_embeddings``).
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
            ``--auto-truncate``: False (TEI's default) refuses an input over ``max_length`` tokens with
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
        from ..config import BertConfig
        from ..embed import SentenceEncoder
        from ..export import model_class_for
        from ..model import BertModel
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
        self._tok_lock = threading.Lock()  # the tokenizer's truncation settings are shared state
        if (self.model_dir / "modules.json").is_file():  # a sentence-transformers folder
            self.encoder = SentenceEncoder.from_pretrained(
                self.model_dir, device=self.device, precision=precision
            )
            self.model = self.encoder.model
            self.tokenizer = self.encoder.tokenizer
            self.architecture = "SentenceTransformer"
        else:
            config = BertConfig.from_pretrained(self.model_dir)
            cls = model_class_for((config.architectures or ["BertModel"])[0])
            self.model = cls.from_pretrained(self.model_dir).to(self.device).eval()
            self.tokenizer = Tokenizer.from_pretrained(self.model_dir)
            bert = self.model if isinstance(self.model, BertModel) else self.model.bert
            self.encoder = SentenceEncoder(
                bert, self.tokenizer, pooling="mean", max_seq_length=max_length, precision=precision
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
            if self.architecture not in ("SentenceTransformer", "BertModel"):
                self._int8_head = int8_static(self.model, int8_engine)
        limit = self.config.max_position_embeddings
        self.max_length = min(max_length or limit, limit)
        self.encoder.max_seq_length = min(self.encoder.max_seq_length, self.max_length)
        if self.architecture == "SentenceTransformer":
            # the folder's own max_seq_length is the one limit: /info reports it, truncation cuts there
            # and truncate: false refuses past it
            self.max_length = self.encoder.max_seq_length
        self.window_stride = window_stride or max(self.max_length // 2, 1)
        if not 0 < self.window_stride:
            raise UserError(f"--window-stride must be >= 1, got {window_stride}")
        self.batcher = Batcher(self._run, on_batch=on_batch, **(batching or {}))

    def close(self) -> None:
        self.batcher.close()

    # ------------------------------------------------------------ capabilities
    @property
    def can_predict(self) -> bool:
        return self.architecture == "BertForSequenceClassification"

    @property
    def can_fill_mask(self) -> bool:
        return self.architecture in ("BertForMaskedLM", "BertForPreTraining")

    @property
    def can_qa(self) -> bool:
        return self.architecture == "BertForQuestionAnswering"

    @property
    def can_ner(self) -> bool:
        return self.architecture == "BertForTokenClassification"

    @property
    def cross_encoder(self) -> bool:
        """A one-output sequence classifier scores (query, text) pairs jointly; others rank by cosine."""
        return self.can_predict and self.config.num_labels == 1

    def routes(self) -> list[str]:
        eps = ["/", "/health", "/info", "/metrics", "/tokenize", "/decode", "/embed", "/embed_all"]
        eps += ["/similarity", "/v1/embeddings", "/rerank"]
        for ok, route in (
            (self.can_predict, "/predict"),
            (self.can_fill_mask, "/fill-mask"),
            (self.can_qa, "/qa"),
            (self.can_ner, "/ner"),
        ):
            if ok:
                eps.append(route)
        return eps

    def require(self, ok: bool, route: str, head: str) -> None:
        if not ok:
            raise ApiError(
                404,
                "unsupported",
                f"this model ({self.architecture}) has no {head} head, so {route} is unavailable; "
                f"it serves {' '.join(self.routes())}",
            )

    def labels(self) -> list[str]:
        c = self.config
        n = c.num_labels
        return (
            [c.id2label.get(i, f"LABEL_{i}") for i in range(n)]
            if c.id2label
            else [f"LABEL_{i}" for i in range(n)]
        )

    def info(self) -> dict[str, Any]:
        c = self.config
        out: dict[str, Any] = {
            "model_id": self.model_id,  # the dir's name only: no filesystem path leaves the server
            "architecture": self.architecture,
            "hidden_size": c.hidden_size,
            "num_hidden_layers": c.num_hidden_layers,
            "vocab_size": c.vocab_size,
            "max_length": self.max_length,
            "max_input_length": self.max_length,  # TEI's name for the same limit
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
            "endpoints": self.routes(),
        }
        if self.can_predict or self.can_ner:
            out["labels"] = self.labels()
            out["num_labels"] = c.num_labels
        return out

    # ------------------------------------------------------------ the model call (batcher side)
    @torch.inference_mode()
    def _run(self, task: str, ids: list[list[int]], type_ids: list[list[int]]) -> list[Any]:

        n, width = len(ids), max(len(x) for x in ids)
        t_ids = torch.full((n, width), self.tokenizer.pad_token_id, dtype=torch.long)
        t_types = torch.zeros((n, width), dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for row, (x, t) in enumerate(zip(ids, type_ids)):
            t_ids[row, : len(x)] = torch.tensor(x)
            t_types[row, : len(x)] = torch.tensor(t)
            mask[row, : len(x)] = 1
        t_ids, t_types, mask = t_ids.to(self.device), t_types.to(self.device), mask.to(self.device)
        if self.int8:
            return self._run_int8(task, ids, t_ids, t_types, mask)
        if task == "embed":
            hidden = self.encoder.hidden_states(t_ids, mask)
            return list(self.encoder.sentence_vectors(hidden, mask).cpu().numpy())
        if task == "hidden":
            hidden = self.encoder.hidden_states(t_ids, mask).cpu().numpy()
            return [hidden[i, : len(x)] for i, x in enumerate(ids)]
        with inference_autocast(self.precision, t_ids.device):
            out = self.model(t_ids, attention_mask=mask, token_type_ids=t_types)
        if task == "classify":
            return list(out.logits.float().cpu().numpy())
        if task == "tokens":
            logits = out.logits.float().cpu().numpy()
            return [logits[i, : len(x)] for i, x in enumerate(ids)]
        if task == "span":
            s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            return [(s[i, : len(x)], e[i, : len(x)]) for i, x in enumerate(ids)]
        raise ValueError(f"unknown task {task!r}")

    def _run_int8(self, task: str, ids: list[list[int]], t_ids: Any, t_types: Any, mask: Any) -> list[Any]:
        if task in ("embed", "hidden"):
            hidden = self._int8_encoder(t_ids, mask, t_types)[0]
            if task == "hidden":
                return [hidden[i, : len(x)].float().numpy() for i, x in enumerate(ids)]
            return list(self.encoder.sentence_vectors(hidden, mask).numpy())
        out = self._int8_head(t_ids, mask, t_types)
        if task == "classify":
            return list(out[0].float().numpy())
        if task == "tokens":
            return [out[0][i, : len(x)].float().numpy() for i, x in enumerate(ids)]
        if task == "span":
            return [
                (out[0][i, : len(x)].float().numpy(), out[1][i, : len(x)].float().numpy())
                for i, x in enumerate(ids)
            ]
        raise ValueError(f"unknown task {task!r}")

    # ------------------------------------------------------------ tokenisation
    def _windows(self, ids: list[int]) -> list[list[int]]:
        """[CLS] w [SEP] windows of at most max_length tokens over ``ids`` (no specials), advancing by the
        stride."""
        room = self.max_length - 2
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

    def _budget(self, texts: list[str], pairs: list[str] | None, long_text: str) -> int:
        if long_text == "windows":
            return sum(windowed_tokens(len(t), 2, self.max_length, self.window_stride) for t in texts)
        extra = [len(p) + 1 for p in pairs] if pairs is not None else [0] * len(texts)
        return sum(truncated_tokens(len(t) + e, self.max_length) for t, e in zip(texts, extra))

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
        refuses a text over ``max_length`` tokens instead of cutting it; ``truncation_direction="left"``
        keeps a long embedding text's last tokens instead of its first.
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
        check_budget(self._budget(texts, pairs, long_text), self.limits)
        with self._tok_lock:
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
                    self.tokenizer, texts, pairs, self.max_length if truncate else sys.maxsize
                )
            else:
                enc = self.tokenizer(
                    texts,
                    max_length=self.max_length if truncate else None,
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
        """413 for the first sequence over ``max_length`` tokens, as TEI refuses it (a validation error).

        ``field``: the request field holding the texts (``inputs`` -> ``inputs[i]``), or one name per
        sequence when they come from several fields (``/rerank``'s query and texts)."""
        for i, x in enumerate(ids):
            if len(x) > self.max_length:
                name = field[i] if isinstance(field, list) else f"{field}[{i}]"
                # OpenAI's request has no truncate field; TEI's routes do
                ask = "" if name.startswith("input[") else "send truncate: true or "
                raise ApiError(
                    413,
                    "validation",
                    f"{name} is {len(x)} tokens long; this model takes at most {self.max_length} "
                    f"(GET /info: max_input_length); to cut it, {ask}start the server with --auto-truncate",
                    name,
                )

    def _untruncated(self, texts: list[str]) -> list[list[int]]:
        if self.encoder.lowercase_input:
            texts = [t.lower() for t in texts]
        enc = self.tokenizer(texts, max_length=None, truncation=False, padding=False, return_tensors=None)
        return enc["input_ids"]

    def _left_truncated(self, texts: list[str]) -> list[list[int]]:
        """[CLS] t [SEP] keeping each text's last ``max_length - 2`` tokens."""
        if self.encoder.lowercase_input:
            texts = [t.lower() for t in texts]
        room = self.max_length - 2
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

    # ------------------------------------------------------------ routes' work
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
        return self._embed(texts, normalize, dimensions, truncate, long_text, field, truncation_direction)

    def _embed(
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
        if dimensions is not None and not 1 <= dimensions <= self.encoder.dim:
            raise validation(
                f"dimensions must be in 1..{self.encoder.dim} for this model, got {dimensions}", "dimensions"
            )
        ids, _, owner = self.encode(
            texts,
            long_text=long_text,
            for_embedding=True,
            truncate=truncate,
            truncation_direction=truncation_direction,
            field=field,
        )
        return self._vectors(ids, owner, len(texts), normalize, dimensions)

    def embed_ids(
        self,
        ids: list[list[int]],
        normalize: bool | None = None,
        dimensions: int | None = None,
        field: str = "input",
        truncate: bool = False,
    ) -> tuple[np.ndarray, int]:
        """:meth:`embed` of sequences already tokenised (OpenAI's token-id input): each runs as given,
        special tokens included; ids outside the vocabulary are refused, and sequences over ``max_length``
        too unless ``truncate`` (then their first ``max_length`` ids run, as TEI cuts them)."""
        if not ids:
            raise validation(f"{field} must hold at least one sequence", field)
        if truncate:
            ids = [seq[: self.max_length] for seq in ids]
        if len(ids) > self.limits.max_batch_size:
            raise too_large(
                f"{field} holds {len(ids)} sequences; this server takes at most {self.limits.max_batch_size} "
                "per request (--max-batch-size)",
                field,
            )
        vocab = self.config.vocab_size
        for i, seq in enumerate(ids):
            name = f"{field}[{i}]" if len(ids) > 1 else field
            if not seq:
                raise validation(f"{name} holds no token ids", field)
            if len(seq) > self.max_length:
                raise ApiError(  # TEI's status and type for an over-long input
                    413,
                    "validation",
                    f"{name} is {len(seq)} tokens long; this model takes at most {self.max_length} "
                    "(GET /info: max_input_length); start the server with --auto-truncate to cut it",
                    field,
                )
            bad = next((t for t in seq if isinstance(t, bool) or not 0 <= t < vocab), None)
            if bad is not None:
                raise validation(f"{name} holds token id {bad}; this model's ids are 0..{vocab - 1}", field)
        check_budget(sum(len(x) for x in ids), self.limits)
        if dimensions is not None and not 1 <= dimensions <= self.encoder.dim:
            raise validation(
                f"dimensions must be in 1..{self.encoder.dim} for this model, got {dimensions}", "dimensions"
            )
        return self._vectors(ids, list(range(len(ids))), len(ids), normalize, dimensions)

    def _vectors(
        self,
        ids: list[list[int]],
        owner: list[int],
        n: int,
        normalize: bool | None,
        dimensions: int | None,
    ) -> tuple[np.ndarray, int]:
        """Run ``ids`` through the batcher: [n, D] vectors (mean over each text's windows) and the tokens."""
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
        """[N, num_labels] logits; ``truncate=False`` refuses a text (or pair) over ``max_length`` tokens
        (``field``: as :meth:`_refuse_long`)."""
        check_texts(texts, field if isinstance(field, str) else "texts", self.limits)
        if pairs is not None:
            if len(pairs) != len(texts):
                raise validation(
                    f"pairs has {len(pairs)} entries but texts has {len(texts)}; give one pair per text"
                )
            check_texts(pairs, "pairs", self.limits)
        ids, types, owner = self.encode(texts, pairs, long_text=long_text, truncate=truncate, field=field)
        return np.stack(self._combine(self.batcher.submit("classify", ids, types), owner, len(texts)))

    def predict(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        long_text: str | None = None,
        field: str = "texts",
    ) -> list[dict[str, Any]]:
        self.require(self.can_predict, "/predict", "sequence-classification")
        logits = self.classify_logits(texts, pairs, long_text, field)
        labels = self.labels()
        results = []
        for row in logits:
            if len(row) == 1 or self.config.problem_type == "regression":
                results.append({"score": float(row[0])})
                continue
            probs = torch.from_numpy(row).softmax(-1).tolist()
            best = int(np.argmax(probs))
            results.append(
                {"label": labels[best], "score": probs[best], "probabilities": dict(zip(labels, probs))}
            )
        return results

    def rerank(
        self, query: str, texts: list[str], raw_scores: bool = False, truncate: bool = True
    ) -> list[float]:
        """One score per text (input order): a cross-encoder's logit (sigmoid unless ``raw_scores``), or
        the cosine similarity of the embeddings. ``truncate=False`` refuses an input over ``max_length``."""
        check_text(query, "query", self.limits)
        check_texts(texts, "texts", self.limits)
        names = [f"texts[{i}]" for i in range(len(texts))]
        if self.cross_encoder:
            pairs = [query] * len(texts)
            logits = self.classify_logits(pairs, list(texts), field=names, truncate=truncate)[:, 0]
            scores = logits if raw_scores else 1.0 / (1.0 + np.exp(-logits))
            return [float(s) for s in scores]
        check_budget(self._budget([query, *texts], None, self.long_text), self.limits)
        # the query is not one of the --max-batch-size texts: checked above on its own
        vecs, _ = self._embed([query, *texts], normalize=True, truncate=truncate, field=["query", *names])
        return [float(s) for s in vecs[1:] @ vecs[0]]

    def qa(
        self,
        items: list[tuple[str, str]],
        doc_stride: int | None = None,
        max_answer_length: int = 30,
        handle_impossible_answer: bool = False,
        null_threshold: float = 0.0,
        field: str = "inputs",
    ) -> list[dict[str, Any]]:
        """One answer per (question, context); see ``pipelines.qa.answer``."""
        from ..pipelines.qa import QASettings, answer

        self.require(self.can_qa, "/qa", "question-answering")
        if not items:
            raise validation(f"{field} must hold at least one question")
        if len(items) > self.limits.max_batch_size:
            raise ApiError(
                413,
                "payload_too_large",
                f"{field} holds {len(items)} questions; this server takes at most {self.limits.max_batch_size} "
                "per request (--max-batch-size)",
            )
        window = min(384, self.max_length)
        query = min(64, self.max_length // 4)
        if doc_stride is None:  # run_squad.py's 128, or the whole room of a smaller model's window
            doc_stride = min(128, window - query - 3)
        settings = QASettings(
            max_seq_length=window,
            doc_stride=doc_stride,
            max_query_length=query,
            max_answer_length=max_answer_length,
            version_2_with_negative=handle_impossible_answer,
            null_threshold=null_threshold,
        )
        if not 1 <= doc_stride <= settings.max_seq_length - settings.max_query_length - 3:
            raise validation(
                f"doc_stride must be in 1..{settings.max_seq_length - settings.max_query_length - 3} "
                f"(the window), got {doc_stride}"
            )
        if max_answer_length < 1:
            raise validation(f"max_answer_length must be >= 1, got {max_answer_length}")
        budget = 0
        for i, (q, c) in enumerate(items):
            name = f"{field}[{i}]" if field == "inputs" else ""
            check_text(q, f"{name}.question" if name else "question", self.limits)
            check_text(c, f"{name}.context" if name else "context", self.limits)
            if not q.strip() or not c.strip():
                raise validation(f"{name or 'the request'}: question and context must hold some text")
            with self._tok_lock:  # e.g. only zero-width or control characters: the model would see nothing
                empty = [f for f, t in (("question", q), ("context", c)) if not self.tokenizer.tokenize(t)]
            if empty:
                raise validation(
                    f"{name or 'the request'}: the {empty[0]} holds no tokens (only characters the tokenizer "
                    "drops, such as zero-width or control characters)"
                )
            fixed = min(len(q), settings.max_query_length) + 3
            budget += windowed_tokens(len(c), fixed, settings.max_seq_length, doc_stride)
        check_budget(budget, self.limits)

        def run(ids: list[list[int]], types: list[list[int]]) -> list[Any]:
            return self.batcher.submit("span", ids, types)

        qs = [(str(i), q, c) for i, (q, c) in enumerate(items)]
        return answer(self.tokenizer, qs, run, settings, lock=self._tok_lock)

    def ner(
        self,
        text: str | None = None,
        words: list[str] | None = None,
        aggregation: str = "first",
    ) -> dict[str, Any]:
        """Entities with character offsets into ``text`` (or into ``" ".join(words)``)."""
        from ..pipelines.ner import AGGREGATIONS, entities, split_words

        self.require(self.can_ner, "/ner", "token-classification")
        if (text is None) == (words is None):
            raise validation("give either text or words (a pre-split sentence), not both or neither")
        if aggregation not in AGGREGATIONS:
            raise validation(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
        if words is not None:
            if not words:
                raise validation("words must hold at least one word")
            for i, w in enumerate(words):
                check_text(w, f"words[{i}]", self.limits)
                if not w or any(c.isspace() for c in w):
                    raise validation(f"words[{i}] must be a non-empty word without whitespace")
            text = " ".join(words)
            check_text(text, "words (joined)", self.limits)
            spans, pos = [], 0
            for w in words:
                spans.append((pos, pos + len(w)))
                pos += len(w) + 1
        else:
            check_text(text, "text", self.limits)
        # every word costs at least one token; windows hold whole words
        check_budget(windowed_tokens(len(text), 2, self.max_length, self.max_length - 2), self.limits)
        with self._tok_lock:
            if words is None:
                spans = split_words(self.tokenizer, text)

        def run(ids: list[list[int]], types: list[list[int]]) -> list[Any]:
            return self.batcher.submit("tokens", ids, types)

        ents, tagged = entities(
            self.model,
            self.tokenizer,
            text,
            spans,
            run,
            self.labels(),
            self.max_length,
            aggregation,
            self._tok_lock,
        )
        out: dict[str, Any] = {"entities": ents}
        if words is not None:
            out["tags"] = tagged["tags"]
        return out

    def fill_mask(self, text: str, top_k: int = 5) -> list[list[dict[str, Any]]]:
        from ..heads.pretraining import fill_mask

        self.require(self.can_fill_mask, "/fill-mask", "masked-LM")
        check_text(text, "text", self.limits)
        vocab = len(self.tokenizer)
        if not 1 <= top_k <= vocab:
            raise validation(f"top_k must be in 1..{vocab} (the vocabulary size), got {top_k}")
        mask = self.tokenizer.mask_token
        if mask not in text:
            raise validation(f"text must contain at least one {mask} token")
        check_fill_mask(text.count(mask), top_k, self.limits)
        check_budget(truncated_tokens(len(text), self.max_length), self.limits)
        with self._tok_lock:
            n = len(self.tokenizer.encode(text).ids)
            if n > self.max_length:
                raise ApiError(
                    413,
                    "payload_too_large",
                    f"text is {n} tokens long; this model takes at most {self.max_length}",
                )
            with inference_autocast(self.precision, self.device):
                return fill_mask(self.model, self.tokenizer, text, top_k=top_k)

    def embed_all(
        self,
        texts: list[str],
        truncate: bool = True,
        truncation_direction: str = "right",
        prompt_name: str | None = None,
        field: str = "inputs",
    ) -> list[np.ndarray]:
        """TEI's /embed_all: the last hidden state of every token, [T_i, H] per text (no pooling)."""
        check_texts(texts, field, self.limits)
        texts = self.encoder.prompts.apply(texts, prompt_name)
        ids, _, _ = self.encode(
            texts,
            long_text="truncate",
            for_embedding=True,
            truncate=truncate,
            truncation_direction=truncation_direction,
            field=field,
        )
        check_embed_all(sum(len(x) for x in ids), self.config.hidden_size, self.limits)
        return self.batcher.submit("hidden", ids)

    def similarity(
        self,
        source: str,
        sentences: list[str],
        prompt_name: str | None = None,
        truncate: bool = True,
        truncation_direction: str = "right",
    ) -> list[float]:
        """TEI's /similarity: cosine similarity of ``source`` with each of ``sentences``."""
        check_text(source, "inputs.source_sentence", self.limits)
        check_texts(sentences, "inputs.sentences", self.limits)
        texts = self.encoder.prompts.apply([source, *sentences], prompt_name)
        check_budget(self._budget(texts, None, self.long_text), self.limits)
        names = ["inputs.source_sentence", *(f"inputs.sentences[{i}]" for i in range(len(sentences)))]
        vecs, _ = self._embed(
            texts,
            normalize=True,
            truncate=truncate,
            field=names,
            truncation_direction=truncation_direction,
        )
        return [float(s) for s in vecs[1:] @ vecs[0]]

    def tei_tokens(
        self, texts: list[str], add_special_tokens: bool = True, prompt_name: str | None = None
    ) -> list[list[dict[str, Any]]]:
        """TEI's /tokenize: per text, ``{id, text, special, start, stop}`` per token; ``start``/``stop``
        are character offsets into the text (null for special tokens)."""
        check_texts(texts, "inputs", self.limits)
        texts = self.encoder.prompts.apply(texts, prompt_name)
        specials = set(self.tokenizer.all_special_ids)
        out = []
        with self._tok_lock:
            encs = [self.tokenizer.encode(t, add_special_tokens=add_special_tokens) for t in texts]
        for t, enc in zip(texts, encs):
            row = []
            for tid, tok, (a, b) in zip(enc.ids, enc.tokens, enc.offsets):
                special = tid in specials
                row.append(
                    {
                        "id": tid,
                        "text": tok if special else t[a:b],
                        "special": special,
                        "start": None if special else a,
                        "stop": None if special else b,
                    }
                )
            out.append(row)
        return out

    def decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """TEI's /decode: token ids back to text, one string per sequence."""
        if not ids:
            raise validation("ids must hold at least one sequence")
        if len(ids) > self.limits.max_batch_size:
            raise too_large(
                f"ids holds {len(ids)} sequences; this server takes at most {self.limits.max_batch_size} "
                "per request (--max-batch-size)"
            )
        check_budget(sum(len(x) for x in ids), self.limits)
        vocab = len(self.tokenizer)
        for i, seq in enumerate(ids):
            bad = next((t for t in seq if not 0 <= t < vocab), None)
            if bad is not None:
                raise validation(f"ids[{i}] holds token id {bad}; this model's ids are 0..{vocab - 1}")
        with self._tok_lock:
            return [self.tokenizer.decode(x, skip_special_tokens=skip_special_tokens) for x in ids]

    def tokenize(self, text: str, pair: str | None = None) -> dict[str, Any]:
        check_text(text, "text", self.limits)
        if pair is not None:
            check_text(pair, "pair", self.limits)
        with self._tok_lock:
            enc = self.tokenizer.encode(text, pair)
        return {
            "tokens": enc.tokens,
            "ids": enc.ids,
            "type_ids": enc.type_ids,
            "offsets": [list(o) for o in enc.offsets],
        }


__all__ = ["LONG_TEXT", "InferenceService"]
