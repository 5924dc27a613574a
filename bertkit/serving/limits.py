"""What one request may cost, checked before the work starts.

Four gates, cheapest first:

1. the body size (``max_body_bytes``): checked by ``BodyLimit`` before the body is parsed (a
   ``Content-Length`` over the limit is refused without reading a byte; a chunked body is counted as it
   arrives and refused once it passes the limit) -> 413;
2. each text (``max_text_chars``, valid Unicode: JSON allows lone surrogates such as ``"\\ud800"``, the
   tokenizer does not) and the number of texts (``max_batch_size``) -> 413 / 422;
3. the model work (``max_request_tokens``): an upper bound on the tokens the request will run through the
   model, computed from character counts before any tokenisation (a WordPiece token covers at least one
   character; truncated sequences count ``max_seq_length``; windowed ones count every window) -> 413;
4. the answer's size: ``/fill-mask`` returns ``top_k`` candidates per ``[MASK]``, so a short text of many
   masks with a vocabulary-sized ``top_k`` would be megabytes of JSON; masks x top_k is bounded by
   ``max_fill_mask_predictions`` -> 413.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .errors import send_error, too_large, validation


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20
    max_text_chars: int = 20_000
    max_batch_size: int = 64
    max_request_tokens: int = 32_768
    max_fill_mask_predictions: int = 1_000
    max_embed_all_values: int = 1_000_000  # /embed_all: tokens x hidden size floats (~10 MB of JSON)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def check_text(text: str, field: str, limits: Limits) -> None:
    """One text: at most ``max_text_chars`` characters of valid Unicode."""
    if len(text) > limits.max_text_chars:
        raise too_large(
            f"{field} is {len(text)} characters long; this server takes at most {limits.max_text_chars} "
            "per text (--max-text-chars)",
            field,
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise validation(
            f"{field} holds a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start}; "
            "send valid Unicode (pair surrogates or use the character itself)",
            field,
        ) from None


def check_texts(texts: list[str], field: str, limits: Limits, allow_empty_list: bool = False) -> None:
    if not texts and not allow_empty_list:
        raise validation(f"{field} must hold at least one text", field)
    if len(texts) > limits.max_batch_size:
        raise too_large(
            f"{field} holds {len(texts)} texts; this server takes at most {limits.max_batch_size} per request "
            "(split the request, or start the server with a larger --max-batch-size)",
            field,
        )
    for i, t in enumerate(texts):
        check_text(t, f"{field}[{i}]", limits)


def check_count(n: int, field: str, unit: str, limits: Limits) -> None:
    """``n`` sequences or questions (``unit``) in one request: at most ``max_batch_size``."""
    if n > limits.max_batch_size:
        raise too_large(
            f"{field} holds {n} {unit}; this server takes at most {limits.max_batch_size} per request "
            "(--max-batch-size)",
            field,
        )


def check_fill_mask(masks: int, top_k: int, limits: Limits) -> None:
    """``masks`` x ``top_k`` candidates, the rows ``/fill-mask`` would return."""
    if masks * top_k > limits.max_fill_mask_predictions:
        raise too_large(
            f"{masks} masks x top_k {top_k} = {masks * top_k} predictions; this server returns at most "
            f"{limits.max_fill_mask_predictions} per request (--max-fill-mask-predictions): send fewer masks "
            "or a smaller top_k"
        )


def check_embed_all(tokens: int, dim: int, limits: Limits) -> None:
    """``/embed_all`` returns ``dim`` floats per token: bound the answer, not only the model work."""
    if tokens * dim > limits.max_embed_all_values:
        raise too_large(
            f"{tokens} tokens x {dim} dimensions = {tokens * dim} values; /embed_all returns at most "
            f"{limits.max_embed_all_values} per request (--max-embed-all-values): send fewer or shorter texts"
        )


def truncated_tokens(chars: int, max_seq_length: int, specials: int = 2) -> int:
    """Upper bound on the tokens of one truncated sequence of ``chars`` characters."""
    return min(chars + specials, max_seq_length)


def windowed_tokens(chars: int, fixed: int, max_seq_length: int, stride: int) -> int:
    """Upper bound on the tokens of the windows over a ``chars``-long text (``fixed`` tokens per window,
    e.g. the question and specials; windows advance by ``stride`` tokens)."""
    room = max(max_seq_length - fixed, 1)
    if chars <= room:
        return chars + fixed
    return (1 + math.ceil((chars - room) / max(stride, 1))) * max_seq_length


def check_budget(tokens: int, limits: Limits) -> None:
    if tokens > limits.max_request_tokens:
        raise too_large(
            f"this request needs up to {tokens} tokens of model work; this server takes at most "
            f"{limits.max_request_tokens} per request (--max-request-tokens): send fewer or shorter texts"
        )


class BodyLimit:
    """ASGI middleware: refuse a request body over ``max_bytes`` with 413 before anything parses it."""

    def __init__(self, app: Any, max_bytes: int, on_error: Any = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_error = on_error

    async def _refuse(self, send: Any, status: int, error_type: str, message: str, path: str = "") -> None:
        await send_error(send, status, error_type, message, path, self.on_error, (b"connection", b"close"))

    def _over(self, size: int | str) -> str:
        return (
            f"the request body is {size} bytes; this server takes at most {self.max_bytes} (--max-body-bytes)"
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await self._refuse(send, 400, "validation", "the Content-Length header is not a number", path)
                return
            if declared > self.max_bytes:
                await self._refuse(send, 413, "payload_too_large", self._over(declared), path)
                return
        # Read the whole body here (at most max_bytes + one chunk), then replay it to the app.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, 413, "payload_too_large", self._over(f"over {self.max_bytes}"), path)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


__all__ = [
    "BodyLimit",
    "Limits",
    "check_budget",
    "check_count",
    "check_embed_all",
    "check_fill_mask",
    "check_text",
    "check_texts",
    "truncated_tokens",
    "windowed_tokens",
]
