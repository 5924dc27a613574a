"""How a tokenizer lays out a pair of texts: the special tokens before, between and after them, and the
segment id of every token. BERT's ``[CLS] a [SEP] b [SEP]`` (segment 0 up to the first [SEP], then 1) is one
layout; RoBERTa's ``<s> a </s></s> b </s>`` (all 0) another. Code that builds pair inputs itself (SQuAD's
windows, the server's cut of long pairs) asks the tokenizer's own layout here rather than assuming BERT's.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from bertkit.errors import UserError

# a tokenizer's layout never changes once loaded; the server asks per request, so probe each file once
_PROBED: weakref.WeakKeyDictionary[Any, PairLayout] = weakref.WeakKeyDictionary()


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


def pair_layout(tokenizer: Any, user: str = "text pairs") -> PairLayout:
    """The tokenizer's own layout of a pair: BERT's for a WordPiece vocabulary; for a ``tokenizer.json`` that
    runs its own template (:class:`~bertkit.tokenizer.BPETokenizer`), read from how it encodes ``("a", "b")``
    once and remembered. UserError (naming the ``user`` that needs it) unless each text stands whole between
    runs of special tokens."""
    from bertkit.tokenizer import BPETokenizer

    if not isinstance(tokenizer, BPETokenizer):
        cls_tok, sep_tok = getattr(tokenizer, "cls_token", "[CLS]"), getattr(tokenizer, "sep_token", "[SEP]")
        return PairLayout.bert(*tokenizer.convert_tokens_to_ids([cls_tok, sep_tok]))
    if tokenizer not in _PROBED:
        _PROBED[tokenizer] = _probe(tokenizer, user)
    return _PROBED[tokenizer]


def _probe(tokenizer: Any, user: str) -> PairLayout:
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
        f"the tokenizer lays out a pair of texts as {tokenizer.convert_ids_to_tokens(ids)}; {user} need "
        "the two texts each whole, with special tokens between them"
    )


__all__ = ["PairLayout", "pair_layout"]
