"""Text pairs encoded in time linear in their length, in the tokenizer's own pair layout.

The tokenizers library truncates a pair after encoding both texts whole, with a cost that grows with the
square of their length (issue 11: 60 KB + 60 KB took 0.97 GB). Here each text is encoded alone (BERT
normalises and word-pieces the two segments independently, so this is the same tokens) and the pair is
then cut as the library's ``longest_first`` cuts it (checked against it in tests/test_serve_routes.py).
An empty second text is no second segment, as transformers' ``tok(a, "")`` and the original
``run_classifier.py`` (``if example.text_b:``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def truncate_pair_as_tokenizers(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """``longest_first`` as the tokenizers library does it, so that ``len(a) + len(b) <= budget``: the
    shorter side (the first on a tie) keeps at most ``budget // 2`` tokens, the longer side the rest. The server
    answers as transformers and TEI do; fine-tuning cuts as the original release
    (:func:`bertkit.tasks.encoding.truncate_pair_as_original`)."""
    if len(a) + len(b) <= budget:
        return a, b
    if len(a) > len(b):
        nb = min(len(b), budget // 2)
        return a[: budget - nb], b[:nb]
    na = min(len(a), budget // 2)
    return a[:na], b[: budget - na]


def encode_pairs(
    tokenizer: Any, texts: Sequence[str], pairs: Sequence[str], max_seq_length: int
) -> tuple[list[list[int]], list[list[int]]]:
    """(input_ids, token_type_ids) of each (text, pair) in the tokenizer's own pair layout (BERT's
    ``[CLS] a [SEP] b [SEP]``, RoBERTa's ``<s> a </s></s> b </s>``: :mod:`bertkit.pair_layout`), cut to
    ``max_seq_length`` tokens."""
    from bertkit.pair_layout import pair_layout

    a_ids = tokenizer.encode_batch_ids(list(texts), add_special_tokens=False)
    b_ids = tokenizer.encode_batch_ids(list(pairs), add_special_tokens=False)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    layout = pair_layout(tokenizer)
    ids, types = [], []
    for a, b, pair in zip(a_ids, b_ids, pairs):
        if pair == "":
            a = a[: max_seq_length - 2]
            ids.append([cls_id, *a, sep_id])
            types.append([0] * (len(a) + 2))
            continue
        window_ids, window_types = layout.window(
            *truncate_pair_as_tokenizers(a, b, max_seq_length - layout.specials)
        )
        ids.append(window_ids)
        types.append(window_types)
    return ids, types


__all__ = ["encode_pairs", "truncate_pair_as_tokenizers"]
