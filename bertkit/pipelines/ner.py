"""Named entities with character offsets, from a token-classification model.

Words: a text is split into BERT's words (the tokenizer's pre-tokenisation: whitespace, then each
punctuation mark and CJK character on its own), or the caller gives the words (a CoNLL sentence). The words
are encoded exactly as ``finetune ner`` encodes them (``tasks.encoding.encode_tokens``: each word's pieces,
the label on its first piece, long sentences in consecutive windows of whole words), so with
``aggregation="first"`` the word labels are the ones ``finetune ner``'s evaluation gives (Viterbi when the
model has a CRF).

Aggregation, as transformers' token-classification pipeline names them:

- ``first``: a word takes the label of its first piece (what the model was trained on);
- ``max``: a word takes the label of its most confident piece;
- ``simple``: every piece keeps its own label and entities are grouped over pieces.

Entities are chunked from the tags as conlleval chunks them: ``{"entity_group", "score" (mean probability), "word", "start", "end"}`` with
``start``/``end`` character offsets into the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

AGGREGATIONS = ("first", "max", "simple")

# run(ids, type_ids) -> per-sequence logits [len(ids), num_labels]
TokenRun = Callable[[list[list[int]], list[list[int]]], list[np.ndarray]]


def split_words(tokenizer: Any, text: str) -> list[tuple[int, int]]:
    """Character spans of the text's BERT words that produce at least one token."""
    enc = tokenizer.encode(text)
    spans: dict[int, list[int]] = {}
    for w, (s, e) in zip(enc.word_ids, enc.offsets):
        if w is None:
            continue
        span = spans.setdefault(w, [s, e])
        span[0], span[1] = min(span[0], s), max(span[1], e)
    return [(s, e) for _, (s, e) in sorted(spans.items())]


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def group(
    tags: Sequence[str], scores: Sequence[float], spans: Sequence[tuple[int, int]], text: str
) -> list[dict]:
    """Entities over tagged units (words or pieces) with character ``spans``, chunked as conlleval
    chunks them (``tasks.metrics.conll_entities``: IOB1, IOB2 and IOBES)."""
    from ..tasks.metrics import conll_entities

    out = []
    for kind, start, stop in conll_entities(tags):
        s, e = spans[start][0], spans[stop - 1][1]
        out.append(
            {
                "entity_group": kind,
                "score": float(np.mean(scores[start:stop])),
                "word": text[s:e],
                "start": s,
                "end": e,
            }
        )
    return out


def tag(
    model: Any,
    tokenizer: Any,
    sentences: Sequence[Sequence[str]],
    run: TokenRun,
    labels: Sequence[str],
    max_seq_length: int,
    aggregation: str = "first",
    lock: Any = None,
) -> list[dict[str, Any]]:
    """Per sentence (a list of words): ``{"tags": [word labels], "scores": [word probabilities],
    "pieces": [(word index, piece label, piece probability, piece index in word)]}``."""
    from ..tasks.encoding import encode_tokens
    from ..tasks.ner import Sentence

    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    sents = [Sentence(list(words), None) for words in sentences]
    with lock or nullcontext():  # the tokenizer's settings are shared state
        feats = encode_tokens(tokenizer, sents, None, max_seq_length)
    logits = run([f.input_ids for f in feats], [f.token_type_ids for f in feats])
    out = [{"tags": ["O"] * len(s.words), "scores": [0.0] * len(s.words), "pieces": []} for s in sents]
    for f, lg in zip(feats, logits):
        firsts = [c for c, lab in enumerate(f.label) if lab != -100]
        probs = _softmax(lg.astype(np.float64))
        if aggregation == "first":
            mask = torch.zeros((1, len(f.input_ids)), dtype=torch.bool)
            mask[0, firsts] = True
            with torch.inference_mode():
                path = model.decode(torch.from_numpy(lg).unsqueeze(0), mask)[0]  # Viterbi with a CRF
        row = out[f.example]
        bounds = [*firsts, len(f.input_ids) - 1]  # a word's pieces run to the next word's first piece
        for j, c in enumerate(firsts):
            w = f.word_start + j
            pieces = range(c, bounds[j + 1])
            if aggregation == "first":
                lab = int(path[j])
                row["scores"][w] = float(probs[c, lab])
            else:
                best = max(pieces, key=lambda p: probs[p].max())
                lab = int(probs[best].argmax())
                row["scores"][w] = float(probs[best, lab])
            row["tags"][w] = labels[lab]
            for k, p in enumerate(pieces):
                pl = int(probs[p].argmax())
                row["pieces"].append((w, labels[pl], float(probs[p, pl]), k))
    return out


def piece_spans(
    tokenizer: Any, text: str, word_spans: Sequence[tuple[int, int]]
) -> list[list[tuple[int, int]]]:
    """Character spans of each word's pieces."""
    out = []
    for s, e in word_spans:
        enc = tokenizer.encode(text[s:e])
        spans = [(s + a, s + b) for (a, b), t in zip(enc.offsets, enc.type_ids) if b > a]
        out.append(spans or [(s, e)])
    return out


def entities(
    model: Any,
    tokenizer: Any,
    text: str,
    word_spans: Sequence[tuple[int, int]],
    run: TokenRun,
    labels: Sequence[str],
    max_seq_length: int,
    aggregation: str = "first",
    lock: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(entities, the word-level tagging) of ``text`` whose words sit at ``word_spans``."""
    words = [text[s:e] for s, e in word_spans]
    tagged = tag(model, tokenizer, [words], run, labels, max_seq_length, aggregation, lock)[0]
    if aggregation != "simple":
        return group(tagged["tags"], tagged["scores"], word_spans, text), tagged
    with lock or nullcontext():
        spans = piece_spans(tokenizer, text, word_spans)
    p_tags, p_scores, p_spans = [], [], []
    for w, lab, score, k in tagged["pieces"]:
        if k < len(spans[w]):
            p_tags.append(lab)
            p_scores.append(score)
            p_spans.append(spans[w][k])
    return group(p_tags, p_scores, p_spans, text), tagged


__all__ = ["AGGREGATIONS", "entities", "group", "split_words", "tag"]
