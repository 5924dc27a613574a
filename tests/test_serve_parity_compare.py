"""experiments/serve_parity.py's comparison of served answers/tags with a fine-tuning run's own (no training)."""

from __future__ import annotations

import pytest

from bertkit.tasks.metrics import conll_scores
from bertkit.tasks.squad_metrics import evaluate
from experiments.serve_parity import compare_ner, compare_squad

DEV = {
    "version": "1.1",
    "data": [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": "Paris is the capital of France. It lies on the Seine.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "capital?",
                            "answers": [{"text": "Paris", "answer_start": 0}],
                        },
                        {
                            "id": "q2",
                            "question": "river?",
                            "answers": [{"text": "the Seine", "answer_start": 43}],
                        },
                    ],
                }
            ],
        }
    ],
}


def test_squad_equal_when_every_answer_matches():
    preds = {"q1": "Paris", "q2": "Seine"}
    r = compare_squad(DEV, preds, evaluate(DEV, preds), dict(preds))
    assert r["equal"] and r["mismatches"] == [] and r["missing"] == []
    assert r["served_metrics"] == r["finetune"] == {"exact": 100.0, "f1": 100.0}


def test_squad_lists_each_differing_and_missing_question():
    preds = {"q1": "Paris", "q2": "Seine"}
    r = compare_squad(DEV, preds, evaluate(DEV, preds), {"q1": "France"})
    assert not r["equal"]
    assert r["missing"] == ["q2"]
    assert r["mismatches"] == [
        {"id": "q1", "finetune": "Paris", "served": "France"},
        {"id": "q2", "finetune": "Seine", "served": None},
    ]
    assert r["served_metrics"]["exact"] == 0.0


def test_squad_unequal_scores_are_not_equal_even_with_equal_answers():
    preds = {"q1": "Paris", "q2": "Seine"}
    wrong = {"exact": 50.0, "f1": 75.0}  # a run whose own scores do not follow from its predictions
    assert not compare_squad(DEV, preds, wrong, dict(preds))["equal"]


GOLD = [["B-PER", "I-PER", "O"], ["O", "B-LOC"]]
WORDS = [["Ada", "Lovelace", "wrote"], ["in", "London"]]


def test_ner_equal_and_rescored():
    pred = [["B-PER", "I-PER", "O"], ["O", "O"]]
    own = conll_scores(GOLD, pred)
    r = compare_ner(GOLD, pred, own, [list(p) for p in pred], WORDS)
    assert r["equal"] and r["mismatches"] == []
    assert (
        r["served_metrics"]["f1"]
        == r["finetune"]["f1"]
        == r["finetune_rescored"]["f1"]
        == pytest.approx(2 / 3)
    )


def test_ner_lists_differing_and_missing_sentences():
    pred = [["B-PER", "I-PER", "O"], ["O", "B-LOC"]]
    own = conll_scores(GOLD, pred)
    served = [["B-PER", "O", "O"], None]
    r = compare_ner(GOLD, pred, own, served, WORDS)
    assert not r["equal"]
    assert r["missing"] == [1]
    assert [m["index"] for m in r["mismatches"]] == [0, 1]
    assert r["mismatches"][0]["served"] == ["B-PER", "O", "O"]
    assert r["served_metrics"]["correct_entities"] == 0  # a missing sentence scores as all "O"


def test_ner_needs_one_entry_per_sentence():
    with pytest.raises(ValueError, match="one entry per sentence"):
        compare_ner(GOLD, GOLD, conll_scores(GOLD, GOLD), [GOLD[0]], WORDS)
