"""The FastAPI application: request shapes (bertkit's own, TEI's, OpenAI's), routes, middleware.

Routes are thin: parse (pydantic), call ``InferenceService``, shape the answer. Errors all take the one
path of ``errors.install_handlers``; the body limit is checked by ``limits.BodyLimit`` before any parsing.
"""

# No `from __future__ import annotations`: FastAPI must resolve the request models defined inside
# create_app from real (not string) annotations.
import base64
import json
import os
import time
from importlib import resources
from typing import Any

from ..errors import UserError
from .access_log import AccessLog
from .connections import DEFAULT_KEEP_ALIVE, DEFAULT_READ_TIMEOUT, connection_cap, protocol_class
from .cors import add_cors, check_origin
from .errors import ApiError, install_handlers, validation
from .headers import ApiKey, RequestMeta
from .limits import BodyLimit, Limits, check_text
from .metrics import Metrics
from .service import InferenceService

INSTALL_HINT = "the server needs FastAPI, uvicorn and prometheus-client: pip install 'bertkit[serve]'"


def require_server_deps() -> None:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT) from None


class _Timing:
    """ASGI middleware: request count and latency per known route (unknown paths count as "other")."""

    def __init__(self, app: Any, metrics: Metrics, routes: set[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope.get("path", "")
        route = route if route in self.routes else "other"
        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.metrics.requests.labels(route).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)


def _json(obj: Any) -> Any:
    """A JSON response written by ``json.dumps`` directly: FastAPI's default encoder walks every float of
    an embedding in Python, which costs more than the model at high request rates.

    NaN and infinity are not JSON (``json.dumps`` would write bare ``NaN`` tokens that clients cannot
    parse): a model that produces them answers 500 with a JSON error instead."""
    from fastapi.responses import Response

    try:
        body = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise ApiError(
            500,
            "model_output",
            "the model produced NaN or infinity for this request; its weights may be corrupt",
        ) from None
    return Response(body, media_type="application/json")


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def create_app(
    service: "InferenceService | str | os.PathLike",
    docs: bool = False,
    threads: int = 256,
    api_key: str | None = None,
    cors_origins: list[str] | None = None,
    access_log: bool = False,
    **service_kwargs: Any,
):
    """The ASGI application for a model directory (or an already-built service).

    ``docs=True`` serves ``/docs`` and ``/openapi.json`` (off by default: they describe the server to
    anyone who can reach it). ``threads``: request threads (each waits on the batcher while its batch runs).
    ``api_key``: every route but /health then needs ``Authorization: Bearer KEY`` (``headers.ApiKey``).
    ``cors_origins``: the origins whose browser pages may call the server (``cors``; none by default).
    ``access_log``: one JSON line per request on stderr (``access_log.AccessLog``).
    """
    if api_key is not None and not api_key:
        raise UserError("--api-key must not be empty")
    cors_origins = [check_origin(o) for o in cors_origins or []]  # before the model loads
    require_server_deps()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse, Response
    from pydantic import BaseModel as _PydanticModel
    from pydantic import ConfigDict, Field

    class BaseModel(_PydanticModel):
        # an unknown field is refused (422 naming it), not ignored: a misspelt option would otherwise
        # silently do nothing
        model_config = ConfigDict(extra="forbid")

    metrics = Metrics()
    if not isinstance(service, InferenceService):
        service = InferenceService(service, on_batch=metrics.on_batch, **service_kwargs)
    else:
        service.batcher.on_batch = metrics.on_batch
    svc = service
    metrics.queue.set_function(svc.batcher.queue_depth)

    @asynccontextmanager
    async def lifespan(app):
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        yield
        svc.close()

    app = FastAPI(
        title="bertkit",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.service = svc
    app.state.metrics = metrics
    install_handlers(app, on_error=metrics.on_error)

    Texts = str | list[str]

    class EmbedRequest(BaseModel):
        texts: list[str] | None = Field(None, description="texts to encode (bertkit's shape)")
        inputs: Texts | None = Field(None, description="TEI's shape: one text or a list")
        normalize: bool | None = None
        truncate: bool | None = None
        truncation_direction: str = "Right"
        prompt_name: str | None = None
        dimensions: int | None = None
        long_text: str | None = None

    class OpenAIEmbeddingsRequest(BaseModel):
        # texts, or token ids (one sequence or several: what LangChain sends)
        input: str | list[str] | list[int] | list[list[int]]
        model: str | None = None
        encoding_format: str = "float"
        dimensions: int | None = None
        user: str | None = None

    class RerankRequest(BaseModel):
        query: str
        texts: list[str]
        return_text: bool = False
        raw_scores: bool = False
        truncate: bool | None = None

    class PredictRequest(BaseModel):
        texts: list[str] | None = None
        pairs: list[str] | None = None
        inputs: str | list[str | list[str]] | None = None
        raw_scores: bool = False
        long_text: str | None = None
        truncate: bool | None = None  # TEI's inputs only: omitted -> --auto-truncate

    class QAItem(BaseModel):
        question: str
        context: str

    class QARequest(BaseModel):
        question: str | None = None
        context: str | None = None
        inputs: list[QAItem] | None = None
        doc_stride: int | None = None
        max_answer_length: int = 30
        handle_impossible_answer: bool = False
        null_threshold: float = 0.0

    class NERRequest(BaseModel):
        text: str | None = None
        words: list[str] | None = None
        aggregation: str = "first"

    class FillMaskRequest(BaseModel):
        text: str
        top_k: int = 5

    class TokenizeRequest(BaseModel):
        text: str | None = Field(None, description="bertkit's shape: one text (and an optional pair)")
        pair: str | None = None
        inputs: Texts | None = Field(None, description="TEI's shape: one text or a list")
        add_special_tokens: bool = True
        prompt_name: str | None = None

    class DecodeRequest(BaseModel):
        ids: list[int] | list[list[int]]
        skip_special_tokens: bool = True

    class EmbedAllRequest(BaseModel):
        inputs: Texts
        truncate: bool | None = None
        truncation_direction: str = "Right"
        prompt_name: str | None = None

    class SimilarityInput(BaseModel):
        source_sentence: str
        sentences: list[str]

    class SimilarityParameters(BaseModel):
        prompt_name: str | None = None
        truncate: bool | None = None
        truncation_direction: str = "Right"

    class SimilarityRequest(BaseModel):
        inputs: SimilarityInput
        parameters: SimilarityParameters | None = None

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/info")
    def info() -> dict[str, Any]:
        return svc.info()

    @app.get("/metrics")
    def prometheus() -> Response:
        body, ctype = metrics.render()
        return Response(body, media_type=ctype)

    @app.get("/", response_class=HTMLResponse)
    def playground() -> HTMLResponse:
        """A self-contained page to try the model's routes (no CDN: the server runs offline)."""
        page = resources.files("bertkit.serving").joinpath("playground.html").read_text(encoding="utf-8")
        return HTMLResponse(page)

    @app.post("/embed")
    def embed(req: EmbedRequest) -> Any:
        if (req.texts is None) == (req.inputs is None):
            raise validation("give either texts (bertkit) or inputs (TEI), not both or neither")
        tei = req.inputs is not None
        texts = _as_list(req.inputs) if tei else req.texts
        # TEI normalises by default; bertkit's shape keeps the model's own setting (None)
        normalize = req.normalize if req.normalize is not None else (True if tei else None)
        t0 = time.perf_counter()
        vecs, _ = svc.embed(
            texts,
            normalize=normalize,
            dimensions=req.dimensions,
            # TEI's shape: an omitted truncate is the server's --auto-truncate; bertkit's cuts (--long-text)
            truncate=svc.resolve_truncate(req.truncate) if tei else req.truncate is not False,
            long_text=req.long_text,
            field="inputs" if tei else "texts",
            truncation_direction=req.truncation_direction,
            prompt_name=req.prompt_name,
        )
        if tei:
            return _json(vecs.tolist())
        return _json(
            {
                "embeddings": vecs.tolist(),
                "dim": int(vecs.shape[1]),
                "count": len(vecs),
                "seconds": round(time.perf_counter() - t0, 4),
            }
        )

    @app.post("/v1/embeddings")
    def openai_embeddings(req: OpenAIEmbeddingsRequest) -> Any:
        if req.encoding_format not in ("float", "base64"):
            raise validation(
                f"encoding_format must be float or base64, got {req.encoding_format!r}", "encoding_format"
            )
        if req.model is not None:  # echoed in the answer: it must be valid Unicode
            check_text(req.model, "model", svc.limits)
        inp = req.input
        if isinstance(inp, list) and inp and not all(isinstance(x, str) for x in inp):
            ids = [inp] if isinstance(inp[0], int) else inp
            vecs, tokens = svc.embed_ids(
                ids, normalize=True, dimensions=req.dimensions, field="input", truncate=svc.auto_truncate
            )
        else:
            texts = _as_list(inp)
            vecs, tokens = svc.embed(
                texts, normalize=True, dimensions=req.dimensions, field="input", truncate=svc.auto_truncate
            )
        data = []
        for i, v in enumerate(vecs):
            emb: Any = v.tolist()
            if req.encoding_format == "base64":
                emb = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
            data.append({"object": "embedding", "embedding": emb, "index": i})
        return _json(
            {
                "object": "list",
                "data": data,
                "model": req.model or svc.model_id,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @app.post("/rerank")
    def rerank(req: RerankRequest) -> list[dict[str, Any]]:
        truncate = svc.resolve_truncate(req.truncate)
        scores = svc.rerank(req.query, req.texts, raw_scores=req.raw_scores, truncate=truncate)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        out = []
        for i in order:
            row: dict[str, Any] = {"index": i, "score": scores[i]}
            if req.return_text:
                row["text"] = req.texts[i]
            out.append(row)
        return out

    @app.post("/predict")
    def predict(req: PredictRequest) -> Any:
        if req.inputs is None:
            if req.texts is None:
                raise validation("give texts (and optionally pairs), or TEI's inputs")
            return _json({"predictions": svc.predict(req.texts, req.pairs, long_text=req.long_text)})
        # TEI: a text, a [text, pair], or a list of those (a batch)
        single = isinstance(req.inputs, str) or (
            len(req.inputs) == 2 and all(isinstance(x, str) for x in req.inputs)
        )  # as TEI: ["a", "b"] is one pair
        items = [req.inputs] if single else list(req.inputs)
        if not items:
            raise validation("inputs must hold at least one text or [text, pair]")
        texts, pairs = [], []
        for k, item in enumerate(items):
            if isinstance(item, str):
                texts.append(item)
                pairs.append(None)
            elif len(item) == 2:
                texts.append(item[0])
                pairs.append(item[1])
            elif len(item) == 1:
                texts.append(item[0])
                pairs.append(None)
            else:
                raise validation(f"inputs[{k}] must be a text or a [text, pair] list, got {len(item)} items")
        if any(p is not None for p in pairs) and any(p is None for p in pairs):
            raise validation("inputs mixes single texts and pairs; send one kind per request")
        svc.require(svc.can_predict, "/predict", "sequence-classification")
        logits = svc.classify_logits(
            texts,
            None if pairs[0] is None else pairs,
            long_text=req.long_text,
            field="inputs",
            truncate=svc.resolve_truncate(req.truncate),
        )
        labels = svc.labels()
        import numpy as np

        # a regression head's outputs are the scores themselves (a softmax over one logit is always 1.0)
        raw = req.raw_scores or svc.config.problem_type == "regression" or logits.shape[1] == 1
        answers = []
        for row in logits:
            scores = row if raw else np.exp(row - row.max()) / np.exp(row - row.max()).sum()
            ranked = sorted(range(len(row)), key=lambda j: -scores[j])
            answers.append([{"score": float(scores[j]), "label": labels[j]} for j in ranked])
        return _json(answers[0] if single else answers)

    @app.post("/qa")
    def qa(req: QARequest) -> Any:
        single = req.inputs is None
        if single and (req.question is None or req.context is None):
            raise validation("give question and context, or inputs: [{question, context}, ...]")
        if not single and (req.question is not None or req.context is not None):
            raise validation("give question and context, or inputs, not both")
        items = [(req.question, req.context)] if single else [(x.question, x.context) for x in req.inputs]
        answers = svc.qa(
            items,
            doc_stride=req.doc_stride,
            max_answer_length=req.max_answer_length,
            handle_impossible_answer=req.handle_impossible_answer,
            null_threshold=req.null_threshold,
            field="request" if single else "inputs",
        )
        for a in answers:
            a.pop("id", None)
        return answers[0] if single else answers

    @app.post("/ner")
    def ner(req: NERRequest) -> dict[str, Any]:
        return svc.ner(req.text, req.words, req.aggregation)

    @app.post("/fill-mask")
    def fill_mask(req: FillMaskRequest) -> dict[str, Any]:
        return {"masks": svc.fill_mask(req.text, req.top_k)}

    @app.post("/tokenize")
    def tokenize(req: TokenizeRequest) -> Any:
        if (req.text is None) == (req.inputs is None):
            raise validation("give either text (bertkit) or inputs (TEI), not both or neither")
        if req.inputs is None:
            return svc.tokenize(req.text, req.pair)
        if req.pair is not None:
            raise validation("pair goes with text (bertkit's shape); TEI's inputs are single texts")
        return svc.tei_tokens(_as_list(req.inputs), req.add_special_tokens, req.prompt_name)

    @app.post("/decode")
    def decode(req: DecodeRequest) -> list[str]:
        ids = req.ids
        seqs = ids if ids and isinstance(ids[0], list) else ([ids] if ids else [])  # one or several
        return svc.decode(seqs, req.skip_special_tokens)

    @app.post("/embed_all")
    def embed_all(req: EmbedAllRequest) -> Any:
        states = svc.embed_all(
            _as_list(req.inputs),
            truncate=svc.resolve_truncate(req.truncate),
            truncation_direction=req.truncation_direction,
            prompt_name=req.prompt_name,
        )
        return _json([x.tolist() for x in states])

    @app.post("/similarity")
    def similarity(req: SimilarityRequest) -> Any:
        params = req.parameters or SimilarityParameters()
        scores = svc.similarity(
            req.inputs.source_sentence,
            req.inputs.sentences,
            params.prompt_name,
            truncate=svc.resolve_truncate(params.truncate),
            truncation_direction=params.truncation_direction,
        )
        return _json(scores)

    known = {r.path for r in app.routes if hasattr(r, "path")}
    # the last added runs first: ids and timing on every answer, then the key, then the body limit
    app.add_middleware(BodyLimit, max_bytes=svc.limits.max_body_bytes, on_error=metrics.on_error)
    if api_key is not None:
        app.add_middleware(ApiKey, key=api_key, on_error=metrics.on_error)
    app.add_middleware(_Timing, metrics=metrics, routes=known)
    add_cors(app, cors_origins)  # outside the key: a browser's preflight carries none
    app.add_middleware(RequestMeta)
    if access_log:  # outermost: it sees every answer, refusals included, with its request id
        app.add_middleware(AccessLog)
    return app


def serve(
    model_dir: "str | os.PathLike",
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "info",
    docs: bool = False,
    max_connections: int | None = None,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    api_key: str | None = None,
    cors_origins: list[str] | None = None,
    access_log: bool = False,
    **service_kwargs: Any,
) -> None:
    """Build the app and run it with uvicorn until interrupted. ``max_connections``, ``read_timeout`` and
    ``keep_alive`` bound what each client connection may hold (bertkit.serving.connections)."""
    require_server_deps()
    try:
        import uvicorn
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    app = create_app(
        model_dir,
        docs=docs,
        api_key=api_key,
        cors_origins=cors_origins,
        access_log=access_log,
        **service_kwargs,
    )
    # h11's own limit on headers stays; the body limit is ours (BodyLimit)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level == "debug" and not access_log,  # ours replaces uvicorn's text lines
        http=protocol_class(connection_cap(max_connections), read_timeout),
        timeout_keep_alive=keep_alive,
    )


__all__ = ["INSTALL_HINT", "Limits", "create_app", "require_server_deps", "serve"]
