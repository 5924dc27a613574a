"""SQuAD evaluation with the official scripts' rules, names and scale (EM/F1 in percent).

v1.1 (``evaluate_v1``): every gold answer counts, the score of a question is the maximum over its gold
answers, a question without a prediction scores 0 and still counts in the total; result keys
``exact_match`` and ``f1`` (plus ``exact``, an alias used across bertkit).

v2.0 (``evaluate_v2``): gold answers that normalise to the empty string are dropped and a question left
with none has the single gold answer ``""``; F1 against an empty side is 1 when both are empty, else 0;
questions without a prediction are left out of the totals; an optional no-answer score per question
(``na_probs``, e.g. ``null_odds.json``) above ``na_prob_thresh`` turns the prediction into "no answer";
with ``na_probs`` the best threshold on the given set is searched (``best_exact``/``best_f1`` and their
``*_thresh``). Keys: ``exact``, ``f1``, ``total``, ``HasAns_*``, ``NoAns_*``, ``best_*``.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bertkit.errors import UserError

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, replace the articles a/an/the by a space, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _token_overlap(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_score(prediction: str, gold: str) -> int:
    """1 when both strings normalise to the same text, else 0 (same rule in v1.1 and v2.0)."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_score_v1(prediction: str, gold: str) -> float:
    """v1.1 token F1: no common token (including two empty answers) gives 0."""
    return _token_overlap(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_score_v2(prediction: str, gold: str) -> float:
    """v2.0 token F1: when either side is empty the score is 1 if both are empty, else 0."""
    pred_tokens = normalize_answer(prediction).split() if prediction else []
    gold_tokens = normalize_answer(gold).split() if gold else []
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _token_overlap(pred_tokens, gold_tokens)


def _questions(dataset: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def _dataset_list(dataset: Any) -> list:
    """Accept either the file's top-level object ({"data": [...]}) or its list of articles."""
    if isinstance(dataset, Mapping):
        return dataset["data"]
    return list(dataset)


def evaluate_v1(dataset: Any, predictions: Mapping[str, str]) -> dict[str, float]:
    """Official SQuAD v1.1 EM/F1 in percent over every question of ``dataset``."""
    exact_total = f1_total = 0.0
    total = 0
    for qa in _questions(_dataset_list(dataset)):
        total += 1
        if qa["id"] not in predictions:
            continue  # unanswered: scores 0 but counts in the total, as the official script does
        golds = [a["text"] for a in qa["answers"]]
        pred = predictions[qa["id"]]
        exact_total += max(exact_score(pred, g) for g in golds)
        f1_total += max(f1_score_v1(pred, g) for g in golds)
    if total == 0:
        raise UserError("SQuAD evaluation: the dataset has no questions")
    exact = 100.0 * exact_total / total
    return {"exact_match": exact, "f1": 100.0 * f1_total / total, "exact": exact}


def has_answer_map(dataset: Any) -> dict[str, bool]:
    """qid -> whether the question has at least one gold answer (v2.0 rule)."""
    return {qa["id"]: bool(qa["answers"]) for qa in _questions(_dataset_list(dataset))}


def raw_scores_v2(dataset: Any, predictions: Mapping[str, str]) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question EM and F1 (0/1 and 0..1) before any no-answer threshold; unpredicted questions are left out."""
    exact: dict[str, int] = {}
    f1: dict[str, float] = {}
    for qa in _questions(_dataset_list(dataset)):
        qid = qa["id"]
        if qid not in predictions:
            continue
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        pred = predictions[qid]
        exact[qid] = max(exact_score(pred, g) for g in golds)
        f1[qid] = max(f1_score_v2(pred, g) for g in golds)
    return exact, f1


def apply_no_answer_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_ans: Mapping[str, bool], threshold: float
) -> dict[str, float]:
    """Where the no-answer score exceeds ``threshold`` the question is scored as if "" was predicted."""
    return {qid: (float(not has_ans[qid]) if na_probs[qid] > threshold else s) for qid, s in scores.items()}


def _eval_block(
    exact: Mapping[str, float], f1: Mapping[str, float], qids: Sequence[str] | None = None
) -> dict:
    keys = list(exact) if not qids else list(qids)
    total = len(keys)
    return {
        "exact": 100.0 * sum(exact[k] for k in keys) / total,
        "f1": 100.0 * sum(f1[k] for k in keys) / total,
        "total": total,
    }


def find_best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """The official search: start from "every question answered as no-answer" (each NoAns question scores
    1), walk the questions by increasing no-answer score, switching each to its prediction; keep the best
    running total. Returns (score in percent, threshold)."""
    current = sum(1 for v in has_ans.values() if not v)
    best, best_thresh = current, 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):  # stable: ties keep na_probs' order
        if qid not in scores:
            continue
        if has_ans[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_thresh = current, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def evaluate_v2(
    dataset: Any,
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Official SQuAD v2.0 evaluation; ``na_probs`` plays the role of the script's ``--na-prob-file``."""
    articles = _dataset_list(dataset)
    has_ans = has_answer_map(articles)
    missing = [q for q in has_ans if q not in predictions]
    if missing:
        raise UserError(
            f"SQuAD v2.0 evaluation: {len(missing)} questions have no prediction (first: {missing[0]!r}); "
            'predict every question of the dataset ("" for no answer)'
        )
    given_na = na_probs is not None
    if na_probs is None:
        na_probs = {k: 0.0 for k in predictions}
    exact_raw, f1_raw = raw_scores_v2(articles, predictions)
    exact_t = apply_no_answer_threshold(exact_raw, na_probs, has_ans, na_prob_thresh)
    f1_t = apply_no_answer_threshold(f1_raw, na_probs, has_ans, na_prob_thresh)
    out: dict[str, float] = _eval_block(exact_t, f1_t)
    has_qids = [k for k, v in has_ans.items() if v]
    no_qids = [k for k, v in has_ans.items() if not v]
    if has_qids:
        out.update({f"HasAns_{k}": v for k, v in _eval_block(exact_t, f1_t, has_qids).items()})
    if no_qids:
        out.update({f"NoAns_{k}": v for k, v in _eval_block(exact_t, f1_t, no_qids).items()})
    if given_na:
        out["best_exact"], out["best_exact_thresh"] = find_best_threshold(
            predictions, exact_raw, na_probs, has_ans
        )
        out["best_f1"], out["best_f1_thresh"] = find_best_threshold(predictions, f1_raw, na_probs, has_ans)
    return out


def evaluate(
    dataset: Any,
    predictions: Mapping[str, str],
    version: str = "1.1",
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Dispatch on the SQuAD version ("1.1" or "2.0")."""
    if str(version) in ("1.1", "v1.1", "1"):
        return evaluate_v1(dataset, predictions)
    if str(version) in ("2.0", "v2.0", "2"):
        return evaluate_v2(dataset, predictions, na_probs=na_probs, na_prob_thresh=na_prob_thresh)
    raise UserError(f"unknown SQuAD version {version!r}: use 1.1 or 2.0")
