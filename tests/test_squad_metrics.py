"""SQuAD metrics: hand-computed cases, and equality with the official evaluation scripts' numbers.

The golden numbers below were produced once by running the official ``evaluate-v1.1.py`` and
``evaluate-v2.0.py`` (outside this repository) on the predictions that ``perturbed_predictions`` builds
from the shared dev files; the test rebuilds the same predictions and checks that bertkit's numbers are
identical.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from bertkit.errors import UserError
from bertkit.tasks import squad_metrics as M


def perturbed_predictions(dataset: dict) -> tuple[dict[str, str], dict[str, float]]:
    """Deterministic predictions of mixed quality (exact, partial, padded, empty, wrong) and no-answer
    odds with many ties, all derived from an md5 of each question id."""
    preds: dict[str, str] = {}
    odds: dict[str, float] = {}
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            words = paragraph["context"].split()
            for qa in paragraph["qas"]:
                h = int(hashlib.md5(qa["id"].encode()).hexdigest(), 16)
                golds = [a["text"] for a in qa["answers"]]
                if golds:
                    base = golds[h % len(golds)]
                else:
                    i = h % len(words)
                    base = " ".join(words[i : i + 1 + (h >> 4) % 4])
                kind = (h >> 8) % 9
                if kind == 1:
                    pred = ""
                elif kind == 2:
                    pred = base + " " + words[(h >> 12) % len(words)]
                elif kind == 3:
                    bw = base.split()
                    pred = " ".join(bw[: max(1, len(bw) // 2)])
                elif kind == 4:
                    pred = "The " + base.upper() + "!"
                elif kind == 5:
                    pred = qa["question"]
                elif kind == 6:
                    pred = base[:-1]
                elif kind == 7:
                    i = (h >> 20) % len(words)
                    pred = " ".join(words[i : i + 3])
                else:
                    pred = base
                preds[qa["id"]] = pred
                # correlated with the truth so that the threshold search has a non-trivial optimum
                shift = (3.0 if not golds else 0.0) - (2.0 if kind in (0, 4) else 0.0)
                odds[qa["id"]] = round(((h >> 32) % 100) / 10.0 - 5.0 + shift, 1)
    return preds, odds


# Official evaluate-v1.1.py on perturbed_predictions(dev-v1.1.json).
GOLDEN_V1 = {"exact_match": 39.1674550614948, "f1": 56.36495822555715}
# Official evaluate-v2.0.py --na-prob-file (odds) on perturbed_predictions(dev-v2.0-half.json).
GOLDEN_V2: dict[str, float] = {
    "exact": 48.190194142810135,
    "f1": 53.20399403850997,
    "total": 6078,
    "HasAns_exact": 27.457044673539517,
    "HasAns_f1": 37.92916692991891,
    "HasAns_total": 2910,
    "NoAns_exact": 67.23484848484848,
    "NoAns_f1": 67.23484848484848,
    "NoAns_total": 3168,
    "best_exact": 56.79499835472195,
    "best_exact_thresh": -2.5,
    "best_f1": 59.30351031319925,
    "best_f1_thresh": -2.1,
}
# ... and without --na-prob-file.
GOLDEN_V2_NO_ODDS: dict[str, float] = {
    "exact": 25.584073708456728,
    "f1": 33.87134095102784,
    "total": 6078,
    "HasAns_exact": 38.69415807560137,
    "HasAns_f1": 56.00343996575487,
    "HasAns_total": 2910,
    "NoAns_exact": 13.541666666666666,
    "NoAns_f1": 13.541666666666666,
    "NoAns_total": 3168,
}


def test_normalize_answer():
    assert M.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert M.normalize_answer("An apple a day") == "apple day"
    assert M.normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert M.normalize_answer("  ") == ""
    assert M.normalize_answer("Café—x") == "café—x"  # only ASCII punctuation is removed


def test_exact_and_f1_hand_computed():
    assert M.exact_score("the Eiffel Tower.", "Eiffel tower") == 1
    assert M.exact_score("Eiffel", "Eiffel tower") == 0
    # pred 3 tokens, gold 2 tokens, 2 common: P=2/3 R=1 -> F1=0.8
    assert M.f1_score_v1("eiffel tower paris", "the Eiffel Tower") == pytest.approx(0.8)
    # repeated tokens count with multiplicity: pred [a1 a1 b] vs gold [a1 b b]: common 2 -> P=R=2/3
    assert M.f1_score_v1("x x y", "x y y") == pytest.approx(2 / 3)
    assert M.f1_score_v1("", "") == 0.0  # v1.1: no common token -> 0
    assert M.f1_score_v2("", "") == 1.0  # v2.0: both empty -> 1
    assert M.f1_score_v2("the", "") == 1.0  # normalises to empty on both sides
    assert M.f1_score_v2("tower", "") == 0.0


def _tiny_dataset(answers_per_q):
    qas = [
        {"id": f"q{i}", "question": "?", "answers": [{"text": t, "answer_start": 0} for t in a]}
        for i, a in enumerate(answers_per_q)
    ]
    return {"version": "x", "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}


def test_evaluate_v1_hand_computed():
    ds = _tiny_dataset([["Paris", "the city of Paris"], ["1990"], ["red"]])
    preds = {"q0": "city of Paris", "q1": "in 1990"}  # q2 missing -> 0, still counted
    out = M.evaluate_v1(ds, preds)
    # q0: EM 1 (matches gold 2 after normalisation); q1: EM 0, F1 = 2*(1/2*1)/(1.5)=2/3
    assert out["exact_match"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert out["exact"] == out["exact_match"]


def test_evaluate_v2_hand_computed_and_threshold():
    ds = _tiny_dataset([["Paris"], [], ["blue sky"], []])
    preds = {"q0": "Paris", "q1": "", "q2": "sky", "q3": "nonsense"}
    odds = {"q0": -2.0, "q1": 3.0, "q2": 0.5, "q3": 1.5}
    out = M.evaluate_v2(ds, preds, na_probs=odds, na_prob_thresh=1.0)
    # threshold 1.0: q1 (3.0) and q3 (1.5) are scored as no-answer -> both NoAns correct.
    assert out["total"] == 4 and out["HasAns_total"] == 2 and out["NoAns_total"] == 2
    assert out["exact"] == pytest.approx(75.0)  # q0 1, q1 1, q2 0, q3 1
    assert out["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3 + 1) / 4)
    assert out["HasAns_exact"] == pytest.approx(50.0)
    assert out["NoAns_exact"] == pytest.approx(100.0)
    # Best threshold walk (sorted by odds): start 2 (NoAns count); q0 +1 -> 3 @-2.0; q2 +0 (EM) -> 3;
    # q3 has a non-empty prediction -> 2; q1 predicted "" -> 2. Best EM 3/4 at -2.0.
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == -2.0
    # F1: q0 -> 3 @-2.0; q2 +2/3 -> 3.667 @0.5; q3 -1; q1 0. Best F1 3.667/4 at 0.5.
    assert out["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and out["best_f1_thresh"] == 0.5
    # without odds no threshold search and nothing thresholded
    plain = M.evaluate_v2(ds, preds)
    assert "best_f1" not in plain and plain["NoAns_exact"] == pytest.approx(50.0)


def test_v2_missing_prediction_is_a_clear_error():
    ds = _tiny_dataset([["a"], []])
    with pytest.raises(UserError, match="no prediction"):
        M.evaluate_v2(ds, {"q0": "a"})


def test_matches_official_v1_script(shared_data):
    ds = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    preds, _ = perturbed_predictions(ds)
    out = M.evaluate(ds, preds, version="1.1")
    for key, value in GOLDEN_V1.items():
        assert out[key] == pytest.approx(value, abs=1e-9), key


def test_matches_official_v2_script(shared_data):
    ds = json.loads((shared_data / "squad" / "dev-v2.0-half.json").read_text(encoding="utf-8"))
    preds, odds = perturbed_predictions(ds)
    out = M.evaluate(ds, preds, version="2.0", na_probs=odds)
    assert set(out) == set(GOLDEN_V2)
    for key, value in GOLDEN_V2.items():
        assert out[key] == pytest.approx(value, abs=1e-9), key
    plain = M.evaluate(ds, preds, version="2.0")
    assert set(plain) == set(GOLDEN_V2_NO_ODDS)
    for key, value in GOLDEN_V2_NO_ODDS.items():
        assert plain[key] == pytest.approx(value, abs=1e-9), key
