"""SQuAD post-processing, the original BERT release's algorithm: logits -> n-best spans -> answer text.

For each example, over all its windows: the ``n_best_size`` highest start and end logits are paired;
a pair is dropped when either index is outside the sequence, not a context token (query, [CLS], [SEP]),
the start token is not in its max-context window, end < start, or the span is longer than
``max_answer_length`` tokens. Candidates are ranked by start+end logit; their text is the WordPiece span
de-tokenised (``" ##"`` and ``"##"`` removed, whitespace collapsed) and mapped back onto the original
context words by :func:`get_final_text`; duplicate texts are dropped; ``n_best_size`` are kept.

v2.0: the null score of an example is the smallest ``start_logit[0] + end_logit[0]`` over its windows; the
null candidate is ranked with the others and the empty text is always in the n-best list. The prediction
is "" when ``null_score - (best non-null start+end) > null_score_diff_threshold``, else the best non-null
text; the difference is written to ``null_odds.json``.

Degenerate cases: with no valid candidate at all the n-best list is ``[{"text": "empty", ...}]`` with
logits 0 (the original's nonce entry, also the v1.1 prediction). In v2.0 an n-best list whose only entry is
the null answer gets the same "empty" entry appended (logits 0) so that a best non-null entry exists: the
null odds are then ``null_score - 0``, and the prediction is "" (no span was valid, so nothing else can be
predicted) -- the original release would crash here.
"""

from __future__ import annotations

import functools
import json
import math
import os
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.chars import is_cjk, is_control, is_punctuation, is_whitespace
from bertkit.io import atomic_write
from bertkit.tasks.squad import SquadExample, SquadFeature


@dataclass
class RawResult:
    unique_id: int
    start_logits: Sequence[float]
    end_logits: Sequence[float]


@dataclass
class Predictions:
    predictions: dict[str, str]  # qid -> answer text ("" = no answer)
    nbest: dict[str, list[dict[str, Any]]]  # qid -> [{"text", "probability", "start_logit", "end_logit"}]
    null_odds: dict[str, float]  # qid -> null score - best non-null score (v2 only, else empty)
    best_non_null: dict[str, str]  # qid -> best non-null text, "" when there is none (v2 only)


# ---------------------------------------------------------------- basic tokenisation (for get_final_text)


@functools.lru_cache(maxsize=1 << 18)
def _basic_piece(piece: str, lowercase: bool) -> tuple[str, ...]:
    chars = []
    for ch in piece:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or is_control(ch):
            continue
        if is_whitespace(ch):
            chars.append(" ")
        elif is_cjk(cp):
            chars.extend((" ", ch, " "))
        else:
            chars.append(ch)
    out: list[str] = []
    for word in "".join(chars).split():
        if lowercase:
            word = unicodedata.normalize("NFD", word.lower())
            word = "".join(c for c in word if unicodedata.category(c) != "Mn")
        part: list[str] = []
        for ch in word:
            if is_punctuation(ch):
                if part:
                    out.append("".join(part))
                    part = []
                out.append(ch)
            else:
                part.append(ch)
        if part:
            out.append("".join(part))
    return tuple(out)


def basic_tokenize(text: str, lowercase: bool = True) -> list[str]:
    """BERT's basic tokenisation: drop NUL/U+FFFD/control characters, whitespace to spaces, spaces around
    CJK characters, split on whitespace, (lower-case and strip accents when ``lowercase``), split off
    every punctuation character. A space always separates, so the text is processed space-separated piece
    by piece, with a cache (post-processing calls this on many overlapping spans of the same words)."""
    out: list[str] = []
    for piece in text.split(" "):
        if piece:
            out.extend(_basic_piece(piece, lowercase))
    return out


def _non_space_index(text: str, n: int) -> int:
    """Index in ``text`` of its ``n``-th (0-based) character that is not " "."""
    seen = -1
    for i, c in enumerate(text):
        if c != " ":
            seen += 1
            if seen == n:
                return i
    raise IndexError(n)


def get_final_text(pred_text: str, orig_text: str, lowercase: bool = True) -> str:
    """Project the normalised prediction ``pred_text`` back onto ``orig_text`` (the original context words
    it came from), e.g. "steve smith" in "Steve Smith's" -> "Steve Smith". ``orig_text`` is basic-tokenised
    and re-joined with spaces; ``pred_text`` is located in it; if both texts have equally many non-space
    characters they are aligned one-to-one (ignoring spaces) and the slice of ``orig_text`` between the
    characters aligned with the prediction's first and last is returned; whenever a step fails (not found,
    lengths differ, an end on a space) ``orig_text`` is returned unchanged."""
    tok_text = " ".join(basic_tokenize(orig_text, lowercase))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    if len(orig_text) - orig_text.count(" ") != len(tok_text) - tok_text.count(" "):
        return orig_text
    if not 0 <= start <= end < len(tok_text) or tok_text[start] == " " or tok_text[end] == " ":
        return orig_text
    ns_start = start - tok_text.count(" ", 0, start)
    ns_end = end - tok_text.count(" ", 0, end)
    return orig_text[_non_space_index(orig_text, ns_start) : _non_space_index(orig_text, ns_end) + 1]


def detokenize(tokens: Sequence[str]) -> str:
    """WordPiece tokens -> text: join with spaces, glue "##" continuations, collapse whitespace."""
    text = " ".join(tokens).replace(" ##", "").replace("##", "")
    return " ".join(text.strip().split())


def span_text(
    example: SquadExample, feature: SquadFeature, start: int, end: int, lowercase: bool = True
) -> str:
    """Final answer text for sequence positions [start, end] of ``feature`` (both context tokens); with a
    BPE tokenizer's character spans, the context's own characters there."""
    if feature.char_spans:
        a, b = feature.char_span(start, end)
        return example.context[a:b].strip()
    tok_text = detokenize(feature.tokens[start : end + 1])
    w0, w1 = feature.orig_index(start), feature.orig_index(end)
    orig_text = " ".join(example.doc_tokens[w0 : w1 + 1])
    return get_final_text(tok_text, orig_text, lowercase)


# ---------------------------------------------------------------- n-best and predictions


def best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
    """Indices of the ``n_best_size`` largest logits, largest first; ties keep the lower index first."""
    arr = np.asarray(logits, dtype=np.float64)
    return np.argsort(-arr, kind="stable")[:n_best_size].tolist()


def softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = 0.0
    for e in exps:  # plain left-to-right sum (not sum(), which compensates on Python >= 3.12)
        total += e
    return [e / total for e in exps]


def compute_predictions(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    results: Sequence[RawResult] | Mapping[int, RawResult],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    lowercase: bool = True,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> Predictions:
    """Predictions, n-best lists and null odds for every example (see the module docstring)."""
    by_example: dict[int, list[SquadFeature]] = {}
    for f in features:
        by_example.setdefault(f.example_index, []).append(f)
    by_id = results if isinstance(results, Mapping) else {r.unique_id: r for r in results}

    preds: dict[str, str] = {}
    nbest_out: dict[str, list[dict[str, Any]]] = {}
    null_odds: dict[str, float] = {}
    best_non_null: dict[str, str] = {}
    for example_index, example in enumerate(examples):
        feats = by_example.get(example_index, [])
        prelim: list[tuple[float, int, int, int, float, float]] = []  # (score, feat, start, end, sl, el)
        score_null = 1000000.0
        null_feat, null_start, null_end = 0, 0.0, 0.0
        for fi, feat in enumerate(feats):
            res = by_id[feat.unique_id]
            start_logits = [float(x) for x in res.start_logits]
            end_logits = [float(x) for x in res.end_logits]
            if version_2_with_negative:
                feat_null = start_logits[0] + end_logits[0]
                if feat_null < score_null:
                    score_null = feat_null
                    null_feat, null_start, null_end = fi, start_logits[0], end_logits[0]
            n_tokens = len(feat.tokens)
            ends = best_indexes(end_logits, n_best_size)
            for s in best_indexes(start_logits, n_best_size):
                if s >= n_tokens or feat.orig_index(s) is None:
                    continue
                if not feat.is_max_context(s):
                    continue
                for e in ends:
                    if e >= n_tokens or feat.orig_index(e) is None:
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    prelim.append((start_logits[s] + end_logits[e], fi, s, e, start_logits[s], end_logits[e]))
        if version_2_with_negative:
            prelim.append((null_start + null_end, null_feat, 0, 0, null_start, null_end))
        prelim.sort(key=lambda p: p[0], reverse=True)  # stable, as the original's sorted()

        seen: set[str] = set()
        nbest: list[tuple[str, float, float]] = []
        for _, fi, s, e, sl, el in prelim:
            if len(nbest) >= n_best_size:
                break
            if s > 0:
                text = span_text(example, feats[fi], s, e, lowercase)
                if text in seen:
                    continue
            else:
                text = ""
            seen.add(text)
            nbest.append((text, sl, el))
        if version_2_with_negative and "" not in seen:
            nbest.append(("", null_start, null_end))
        if not nbest:
            nbest.append(("empty", 0.0, 0.0))
        all_null = version_2_with_negative and not any(t for t, _, _ in nbest)
        if all_null:
            nbest.append(("empty", 0.0, 0.0))  # nonce non-null entry (see the module docstring)

        probs = softmax([sl + el for _, sl, el in nbest])
        nbest_out[example.qas_id] = [
            {"text": t, "probability": p, "start_logit": sl, "end_logit": el}
            for (t, sl, el), p in zip(nbest, probs)
        ]
        if not version_2_with_negative:
            preds[example.qas_id] = nbest[0][0]
        else:
            best = next(entry for entry in nbest if entry[0])
            diff = score_null - best[1] - best[2]
            null_odds[example.qas_id] = diff
            best_non_null[example.qas_id] = "" if all_null else best[0]
            preds[example.qas_id] = "" if diff > null_score_diff_threshold else best_non_null[example.qas_id]
    return Predictions(preds, nbest_out, null_odds, best_non_null)


def apply_threshold(p: Predictions, threshold: float) -> dict[str, str]:
    """v2 predictions re-decided at another null-score-difference threshold."""
    return {qid: "" if diff > threshold else p.best_non_null[qid] for qid, diff in p.null_odds.items()}


def write_predictions(
    p: Predictions, out_dir: str | os.PathLike, version_2_with_negative: bool
) -> dict[str, str]:
    """predictions.json, nbest_predictions.json and (v2) null_odds.json, atomically, in the official
    formats (indent 4, as the original). Returns {name: path}."""
    paths = {}
    files = [("predictions.json", p.predictions), ("nbest_predictions.json", p.nbest)]
    if version_2_with_negative:
        files.append(("null_odds.json", p.null_odds))
    for name, obj in files:
        path = os.path.join(os.fspath(out_dir), name)
        with atomic_write(path) as f:
            f.write(json.dumps(obj, indent=4, ensure_ascii=False) + "\n")
        paths[name] = path
    return paths
