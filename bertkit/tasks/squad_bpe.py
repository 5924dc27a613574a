"""SQuAD documents for a byte-level BPE tokenizer (ModernBERT's).

WordPiece features tokenise every whitespace word on its own; byte-level BPE cannot: its tokens carry the
whitespace before a word (``" river"`` is not ``"river"``), so a word tokenised alone is not the token the
model saw in running text. Here the whole context is tokenised once and each token keeps its character span
in the context (the tokenizer's offsets, which point into the text as written, before normalisation):

* the answer's character span gives its token span directly (no re-tokenised answer to match);
* a predicted token span gives its text as the context's characters between the first token's first
  non-whitespace character and the last token's end, so every answer is a substring of the context;
* each token is mapped to the whitespace word its first non-whitespace character belongs to (a token of
  whitespace only: the word before it), which is what windows and max-context need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class BPEDocument:
    """One context tokenised whole: token strings and ids, each token's word, and its character span
    ``(first non-whitespace character, end)`` in the context (``(end, end)`` for whitespace-only tokens)."""

    tokens: list[str]
    ids: list[int]
    tok_to_orig: list[int]
    char_spans: list[tuple[int, int]]


def is_bpe(tokenizer: Any) -> bool:
    from bertkit.tokenizer import BPETokenizer

    return isinstance(tokenizer, BPETokenizer)


def bpe_document(tokenizer: Any, context: str, char_to_word: Sequence[int]) -> BPEDocument:
    """Tokenise ``context`` whole; ``char_to_word`` is :func:`bertkit.tasks.squad.split_context`'s map."""
    enc = tokenizer.encode(context, add_special_tokens=False)
    spans: list[tuple[int, int]] = []
    words: list[int] = []
    for start, end in enc.offsets:
        first = start
        while first < end and context[first].isspace():
            first += 1
        spans.append((first, end) if first < end else (end, end))
        at = first if first < end else start
        words.append(max(char_to_word[at], 0) if at < len(char_to_word) else max(len(char_to_word) - 1, 0))
    return BPEDocument(list(enc.tokens), list(enc.ids), words, spans)


def answer_tokens(doc: BPEDocument, start_char: int, end_char: int) -> tuple[int, int]:
    """Token span ``[first, last]`` covering the answer characters ``[start_char, end_char)``; (-1, -1)
    when no token covers them (characters the tokenizer dropped)."""
    first = next((i for i, (_, e) in enumerate(doc.char_spans) if e > start_char), None)
    last = next((i for i in range(len(doc.char_spans) - 1, -1, -1) if doc.char_spans[i][0] < end_char), None)
    if first is None or last is None or last < first:
        return -1, -1
    return first, last
