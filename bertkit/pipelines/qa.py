"""Extractive question answering over a context of any length, as the original ``run_squad.py``.

The context is split into whitespace words, word-pieced, and cut into windows ``doc_stride`` tokens apart
(``tasks.squad.convert_examples_to_features``); each window's start/end logits go through the original's
post-processing (``tasks.squad_postprocess.compute_predictions``: n-best spans within the max-context
window, ``get_final_text``, and for v2 models the null score against ``null_threshold``). So an answer is
exactly what ``finetune squad``'s evaluation predicts for the same model and question. The answer is then
located in the context: its word span comes from the winning window and logits, its characters from the
words' offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from ..tasks import squad as S
from ..tasks import squad_postprocess as P

# run(ids, type_ids) -> [(start_logits, end_logits)] one per sequence, over its real tokens
SpanRun = Callable[[list[list[int]], list[list[int]]], list[tuple[Any, Any]]]


@dataclass(frozen=True)
class QASettings:
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    null_threshold: float = 0.0


def _word_starts(context: str) -> list[int]:
    """Character offset of each whitespace word of ``context`` (as ``split_context`` splits it)."""
    char_to_word = S.split_context(context)[1]
    return [i for i, w in enumerate(char_to_word) if w >= 0 and (i == 0 or char_to_word[i - 1] != w)]


def examples_for(items: Sequence[tuple[str, str, str]]) -> list[S.SquadExample]:
    """(id, question, context) -> examples; questions on the same context share its word list."""
    by_context: dict[str, list[str]] = {}
    out = []
    for qid, question, context in items:
        if context not in by_context:
            by_context[context] = S.split_context(context)[0]
        out.append(
            S.SquadExample(
                qas_id=qid, question_text=question, doc_tokens=by_context[context], context=context
            )
        )
    return out


def features_for(tokenizer: Any, examples: list[S.SquadExample], s: QASettings) -> list[S.SquadFeature]:
    return S.convert_examples_to_features(
        examples, tokenizer, s.max_seq_length, s.doc_stride, s.max_query_length, is_training=False
    )


def _span_of(
    feats: list[S.SquadFeature], results: dict[int, P.RawResult], start_logit: float, end_logit: float
) -> tuple[S.SquadFeature, int, int] | None:
    """The window and positions that gave the n-best entry with these logits."""
    for f in feats:
        r = results[f.unique_id]
        for s in range(len(f.input_ids)):
            if float(r.start_logits[s]) != start_logit or f.orig_index(s) is None:
                continue
            for e in range(s, len(f.input_ids)):
                if float(r.end_logits[e]) == end_logit and f.orig_index(e) is not None:
                    return f, s, e
    return None


def _locate(
    context: str, words: list[str], hit: tuple[S.SquadFeature, int, int] | None, text: str
) -> tuple[int, int] | None:
    """Character [start, end) of ``text`` inside the span ``hit`` gave: its characters for a BPE tokenizer's
    window (the text is theirs, stripped), else its context words."""
    if hit is None or not text:
        return None
    f, s, e = hit
    if f.char_spans:
        a, b = f.char_span(s, e)
        k = context.find(text, a, b)
        return None if k < 0 else (k, k + len(text))
    starts = _word_starts(context)
    ws, we = f.orig_index(s), f.orig_index(e)
    assert ws is not None and we is not None
    joined = " ".join(words[ws : we + 1])
    k = joined.find(text)
    if k < 0:
        return None
    # walk the joined string back to context characters (the words may be separated by any whitespace)
    pos = [starts[ws] + j for j in range(len(words[ws]))]
    for w in range(ws + 1, we + 1):
        pos.append(-1)  # the joining space
        pos.extend(starts[w] + j for j in range(len(words[w])))
    first, last = pos[k], pos[k + len(text) - 1]
    if first < 0 or last < 0:
        return None
    return first, last + 1


def answer(
    tokenizer: Any,
    items: Sequence[tuple[str, str, str]],
    run: SpanRun,
    s: QASettings,
    lowercase: bool | None = None,
    lock: Any = None,
) -> list[dict[str, Any]]:
    """One answer per (id, question, context): ``{"id", "answer", "start", "end", "score", "start_logit",
    "end_logit"}`` (+ ``"null_score_diff"``, ``"no_answer"`` for v2). ``score`` is the answer's
    probability among the n-best spans (the original's nbest ``probability``). ``lock`` guards the
    tokenizer (its settings are shared state) while the features are built."""
    examples = examples_for(items)
    with lock or nullcontext():
        feats = features_for(tokenizer, examples, s)
    outputs = run([f.input_ids for f in feats], [f.token_type_ids for f in feats])
    results = {f.unique_id: P.RawResult(f.unique_id, st, en) for f, (st, en) in zip(feats, outputs)}
    if lowercase is None:
        lowercase = bool(getattr(tokenizer, "lowercase", True))
    preds = P.compute_predictions(
        examples,
        feats,
        results,
        n_best_size=s.n_best_size,
        max_answer_length=s.max_answer_length,
        lowercase=lowercase,
        version_2_with_negative=s.version_2_with_negative,
        null_score_diff_threshold=s.null_threshold,
    )
    by_example: dict[int, list[S.SquadFeature]] = {}
    for f in feats:
        by_example.setdefault(f.example_index, []).append(f)
    out = []
    for i, ex in enumerate(examples):
        qid, _, context = items[i]
        text = preds.predictions[ex.qas_id]
        best = next((n for n in preds.nbest[ex.qas_id] if n["text"] == text), preds.nbest[ex.qas_id][0])
        row: dict[str, Any] = {
            "id": qid,
            "answer": text,
            "start": None,
            "end": None,
            "score": float(best["probability"]),
            "start_logit": float(best["start_logit"]),
            "end_logit": float(best["end_logit"]),
        }
        if text:
            span = _span_of(by_example.get(i, []), results, best["start_logit"], best["end_logit"])
            where = _locate(context, ex.doc_tokens, span, text)
            if where is not None:
                row["start"], row["end"] = where
        if s.version_2_with_negative:
            row["null_score_diff"] = float(preds.null_odds[ex.qas_id])
            row["no_answer"] = text == ""
        out.append(row)
    return out


__all__ = ["QASettings", "answer", "examples_for", "features_for"]
