"""HTTP inference server for a model directory (FastAPI; install with ``pip install 'bertkit[serve]'``).

Endpoints (JSON in, JSON out):

- ``GET /health``: ``{"status": "ok"}``
- ``GET /info``: architecture, sizes, labels, limits and the endpoints this model offers
- ``POST /embed`` ``{"texts": [...], "normalize": false}`` -> ``{"embeddings": [[...]], "dim": H}``
- ``POST /predict`` ``{"texts": [...], "pairs": [...]?}`` (sequence-classification dirs) ->
  ``{"predictions": [{"label", "score", "probabilities"}]}`` (regression heads: ``{"score"}``)
- ``POST /fill-mask`` ``{"text": "... [MASK] ...", "top_k": 5}`` (MLM / pre-training dirs)
- ``POST /tokenize`` ``{"text", "pair"?}`` -> tokens, ids, type_ids, offsets

Each request is encoded in length-sorted batches of ``batch_size``; requests with more than
``max_batch_size`` texts get a 422 naming the limit. Model calls are serialised by a lock (the
tokenizer's settings and the weights are shared), and run in FastAPI's worker threads.
"""

# No `from __future__ import annotations`: FastAPI must resolve the request models defined inside
# create_app from real (not string) annotations.
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch

from .errors import UserError

INSTALL_HINT = "the server needs FastAPI and uvicorn: pip install 'bertkit[serve]'"


def _require_fastapi() -> None:
    try:
        import fastapi  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT) from None


class InferenceService:
    """The model behind the server, usable without HTTP (and by tests)."""

    def __init__(
        self,
        model_dir: str | os.PathLike,
        max_batch_size: int = 64,
        batch_size: int = 32,
        max_length: int | None = None,
        device: str | None = None,
    ) -> None:
        from .config import BertConfig
        from .embed import SentenceEncoder
        from .export import model_class_for
        from .model import BertModel
        from .tokenizer import Tokenizer

        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise UserError(f"{self.model_dir}: model directory not found")
        self.max_batch_size = max_batch_size
        self.batch_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.lock = threading.Lock()
        if (self.model_dir / "modules.json").is_file():  # a sentence-transformers folder
            self.encoder = SentenceEncoder.from_pretrained(self.model_dir, device=self.device)
            self.model = self.encoder.model
            self.tokenizer = self.encoder.tokenizer
            self.architecture = "SentenceTransformer"
        else:
            config = BertConfig.from_pretrained(self.model_dir)
            self.architecture = (config.architectures or ["BertModel"])[0]
            cls = model_class_for(self.architecture)
            self.model = cls.from_pretrained(self.model_dir).to(self.device).eval()
            self.tokenizer = Tokenizer.from_pretrained(self.model_dir)
            bert = self.model if isinstance(self.model, BertModel) else self.model.bert
            self.encoder = SentenceEncoder(bert, self.tokenizer, pooling="mean", max_seq_length=max_length)
            self.architecture = type(self.model).__name__
        self.config = self.model.config
        limit = self.config.max_position_embeddings
        self.max_length = min(max_length or limit, limit)

    # ------------------------------------------------------------ capabilities
    @property
    def can_predict(self) -> bool:
        return self.architecture == "BertForSequenceClassification"

    @property
    def can_fill_mask(self) -> bool:
        return self.architecture in ("BertForMaskedLM", "BertForPreTraining")

    def endpoints(self) -> list[str]:
        eps = ["/health", "/info", "/embed", "/tokenize"]
        if self.can_predict:
            eps.append("/predict")
        if self.can_fill_mask:
            eps.append("/fill-mask")
        return eps

    def info(self) -> dict[str, Any]:
        c = self.config
        out: dict[str, Any] = {
            "model_dir": str(self.model_dir),
            "architecture": self.architecture,
            "hidden_size": c.hidden_size,
            "num_hidden_layers": c.num_hidden_layers,
            "vocab_size": c.vocab_size,
            "max_length": self.max_length,
            "max_batch_size": self.max_batch_size,
            "pooling": self.encoder.pooling,
            "normalize": self.encoder.normalize,
            "device": str(self.device),
            "endpoints": self.endpoints(),
        }
        if self.can_predict:
            out["labels"] = [c.id2label[i] for i in sorted(c.id2label)] if c.id2label else None
            out["num_labels"] = c.num_labels
        return out

    # --------------------------------------------------------------- checks
    def check_texts(self, texts: list[str], field: str = "texts") -> None:
        if not texts:
            raise ValueError(f"{field} must hold at least one text")
        if len(texts) > self.max_batch_size:
            raise ValueError(
                f"{field} holds {len(texts)} texts but this server takes at most {self.max_batch_size} "
                "per request (split the request, or start it with a larger --max-batch-size)"
            )

    # ------------------------------------------------------------- inference
    def embed(self, texts: list[str], normalize: bool = False) -> list[list[float]]:
        self.check_texts(texts)
        with self.lock:
            vectors = self.encoder.encode(texts, batch_size=self.batch_size, normalize=normalize)
        return vectors.tolist()

    @torch.inference_mode()
    def predict(self, texts: list[str], pairs: list[str] | None = None) -> list[dict[str, Any]]:
        if not self.can_predict:
            raise LookupError(
                f"{self.architecture} has no sequence-classification head; /predict is unavailable"
            )
        self.check_texts(texts)
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(
                f"pairs has {len(pairs)} entries but texts has {len(texts)}; give one pair per text"
            )
        c = self.config
        results: list[dict[str, Any]] = [{} for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]) - (len(pairs[i]) if pairs else 0))
        with self.lock:
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                enc = self.tokenizer(
                    [texts[i] for i in idx],
                    [pairs[i] for i in idx] if pairs is not None else None,
                    max_length=self.max_length,
                    truncation=True,
                    padding=True,
                    return_tensors="pt",
                )
                logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits.float().cpu()
                for row, i in enumerate(idx):
                    if logits.shape[1] == 1 or c.problem_type == "regression":
                        results[i] = {"score": float(logits[row, 0])}
                        continue
                    probs = logits[row].softmax(-1)
                    best = int(probs.argmax())
                    labels = c.id2label or {j: f"LABEL_{j}" for j in range(logits.shape[1])}
                    results[i] = {
                        "label": labels[best],
                        "score": float(probs[best]),
                        "probabilities": {labels[j]: float(p) for j, p in enumerate(probs.tolist())},
                    }
        return results

    def fill_mask(self, text: str, top_k: int = 5) -> list[list[dict[str, Any]]]:
        from .heads.pretraining import fill_mask

        if not self.can_fill_mask:
            raise LookupError(f"{self.architecture} has no masked-LM head; /fill-mask is unavailable")
        mask = self.tokenizer.mask_token
        if mask not in text:
            raise ValueError(f"text must contain at least one {mask} token")
        with self.lock:
            n = len(self.tokenizer.encode(text).ids)
            if n > self.max_length:
                raise ValueError(f"text is {n} tokens long; this model takes at most {self.max_length}")
            return fill_mask(self.model, self.tokenizer, text, top_k=top_k)

    def tokenize(self, text: str, pair: str | None = None) -> dict[str, Any]:
        with self.lock:
            enc = self.tokenizer.encode(text, pair)
        return {
            "tokens": enc.tokens,
            "ids": enc.ids,
            "type_ids": enc.type_ids,
            "offsets": [list(o) for o in enc.offsets],
        }


def create_app(service: InferenceService | str | os.PathLike, **service_kwargs: Any):
    """The FastAPI application for a model directory (or an already-built service)."""
    _require_fastapi()
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel, Field

    if not isinstance(service, InferenceService):
        service = InferenceService(service, **service_kwargs)
    svc = service

    class EmbedRequest(BaseModel):
        texts: list[str] = Field(..., description="texts to encode")
        normalize: bool = False

    class PredictRequest(BaseModel):
        texts: list[str]
        pairs: list[str] | None = None

    class FillMaskRequest(BaseModel):
        text: str
        top_k: int = Field(5, ge=1, le=100)

    class TokenizeRequest(BaseModel):
        text: str
        pair: str | None = None

    app = FastAPI(title="bertkit", description=f"BERT inference for {svc.model_dir}")
    app.state.service = svc

    def call(fn, *args):
        try:
            return fn(*args)
        except ValueError as e:
            raise HTTPException(status_code=422, detail=str(e)) from None
        except LookupError as e:
            raise HTTPException(status_code=404, detail=str(e)) from None

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/info")
    def info() -> dict[str, Any]:
        return svc.info()

    @app.post("/embed")
    def embed(req: EmbedRequest) -> dict[str, Any]:
        t0 = time.perf_counter()
        vectors = call(svc.embed, req.texts, req.normalize)
        return {
            "embeddings": vectors,
            "dim": svc.config.hidden_size,
            "count": len(vectors),
            "seconds": round(time.perf_counter() - t0, 4),
        }

    @app.post("/predict")
    def predict(req: PredictRequest) -> dict[str, Any]:
        return {"predictions": call(svc.predict, req.texts, req.pairs)}

    @app.post("/fill-mask")
    def fill_mask(req: FillMaskRequest) -> dict[str, Any]:
        return {"masks": call(svc.fill_mask, req.text, req.top_k)}

    @app.post("/tokenize")
    def tokenize(req: TokenizeRequest) -> dict[str, Any]:
        return call(svc.tokenize, req.text, req.pair)

    return app


def serve(
    model_dir: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 8080,
    max_batch_size: int = 64,
    device: str | None = None,
    log_level: str = "info",
) -> None:
    """Build the app and run it with uvicorn until interrupted."""
    _require_fastapi()
    try:
        import uvicorn
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    app = create_app(model_dir, max_batch_size=max_batch_size, device=device)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


__all__ = ["INSTALL_HINT", "InferenceService", "create_app", "serve"]
