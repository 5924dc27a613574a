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

from bertkit.errors import UserError


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


@dataclass(frozen=True)
class PairLayout:
    """The special tokens a tokenizer puts around a (question, context) pair, ``prefix question middle context
    suffix``, with the segment id of every token: ``[CLS] q [SEP] c [SEP]`` (BERT's and ModernBERT's: 0 up to
    the first [SEP], then 1) or RoBERTa's ``<s> q </s></s> c </s>`` (all 0)."""

    prefix: tuple[int, ...]
    middle: tuple[int, ...]
    suffix: tuple[int, ...]
    prefix_types: tuple[int, ...]
    middle_types: tuple[int, ...]
    suffix_types: tuple[int, ...]
    question_type: int = 0
    context_type: int = 1

    @property
    def specials(self) -> int:
        """How many special tokens a window carries."""
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    @classmethod
    def bert(cls, cls_id: int, sep_id: int) -> PairLayout:
        """``[CLS] q [SEP] c [SEP]``, the layout of every WordPiece model."""
        return cls((cls_id,), (sep_id,), (sep_id,), (0,), (0,), (1,))

    def window(self, question: list[int], context: list[int]) -> tuple[list[int], list[int]]:
        """(input ids, segment ids) of one window: ids of the question and of the context's slice."""
        ids = [*self.prefix, *question, *self.middle, *context, *self.suffix]
        types = [*self.prefix_types, *[self.question_type] * len(question), *self.middle_types]
        return ids, types + [self.context_type] * len(context) + list(self.suffix_types)


def pair_layout(tokenizer: Any) -> PairLayout:
    """The tokenizer's own layout of a pair, read from how it encodes ``("a", "b")``; UserError unless each
    text stands whole between runs of special tokens."""
    a = tokenizer.encode("a", add_special_tokens=False).ids
    b = tokenizer.encode("b", add_special_tokens=False).ids
    enc = tokenizer.encode("a", "b")
    ids, types = list(enc.ids), list(enc.type_ids)
    special = set(tokenizer.all_special_ids)

    def only_special(lo: int, hi: int) -> bool:
        return all(t in special for t in ids[lo:hi])

    for i in range(len(ids)):  # question at i, context at j: only special tokens around them
        if ids[i : i + len(a)] != a or not only_special(0, i):
            continue
        for j in range(i + len(a) + 1, len(ids)):
            k = j + len(b)
            if ids[j:k] == b and only_special(i + len(a), j) and only_special(k, len(ids)):
                return PairLayout(
                    tuple(ids[:i]), tuple(ids[i + len(a) : j]), tuple(ids[k:]),
                    tuple(types[:i]), tuple(types[i + len(a) : j]), tuple(types[k:]),
                    question_type=types[i], context_type=types[j],
                )  # fmt: skip
    raise UserError(
        f"the tokenizer lays out a question and context as {tokenizer.convert_ids_to_tokens(ids)}; SQuAD "
        "features need the question and the context each whole, with special tokens between them"
    )


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
