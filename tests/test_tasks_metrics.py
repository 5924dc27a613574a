"""Metrics against hand-computed values (no scipy / sklearn needed)."""

import math

import pytest

from bertkit.tasks import metrics as M


def test_accuracy_f1_macro():
    assert M.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    # tp=2 fp=1 fn=1 -> P=R=2/3 -> F1=2/3
    assert M.binary_f1([1, 1, 1, 0, 0], [1, 1, 0, 1, 0]) == pytest.approx(2 / 3)
    assert M.binary_f1([0, 0], [1, 1]) == 0.0
    # class a: tp1 fp0 fn1 -> 2/3 ; class b: tp2 fp1 fn0 -> 0.8
    assert M.macro_f1(["a", "b", "b", "b"], ["a", "a", "b", "b"]) == pytest.approx((2 / 3 + 0.8) / 2)
    with pytest.raises(ValueError):
        M.accuracy([1], [1, 2])


def test_mcc_binary_and_degenerate():
    preds = [1, 1, 0, 0, 1, 0, 1, 0]
    labels = [1, 0, 0, 0, 1, 1, 1, 0]
    # tp=3 fp=1 fn=1 tn=3 -> (9-1)/sqrt(4*4*4*4) = 0.5
    assert M.matthews_corrcoef(preds, labels) == pytest.approx(0.5)
    assert M.matthews_corrcoef([1 - p for p in labels], labels) == pytest.approx(-1.0)
    assert M.matthews_corrcoef([1] * 4, [1, 0, 1, 0]) == 0.0  # constant prediction: undefined -> 0
    # string labels, as the GLUE readers produce
    assert M.matthews_corrcoef([str(p) for p in preds], [str(y) for y in labels]) == pytest.approx(0.5)


def test_pearson_spearman_with_ties():
    x = [1, 2, 3, 4, 5]
    y = [2, 4, 5, 4, 5]
    assert M.pearson(x, y) == pytest.approx(6 / math.sqrt(60))
    assert M.rankdata(y) == [1, 2.5, 4.5, 2.5, 4.5]
    assert M.spearman(x, y) == pytest.approx(7 / math.sqrt(90))
    assert M.spearman([3, 1, 2], [30, 10, 20]) == pytest.approx(1.0)
    assert M.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_conll_entities_iob1_iob2_iobes():
    assert M.conll_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    # IOB1: I- starts an entity; B- only separates two adjacent entities of one type
    assert M.conll_entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [
        ("PER", 0, 2),
        ("PER", 2, 3),
        ("LOC", 4, 5),
    ]
    # a type change inside a run ends one entity and starts another
    assert M.conll_entities(["I-PER", "I-ORG"]) == [("PER", 0, 1), ("ORG", 1, 2)]
    assert M.conll_entities(["B-PER", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 2)]
    assert M.conll_entities(["O", "I-MISC", "O"]) == [("MISC", 1, 2)]
    assert M.conll_entities(["B-ORG"]) == [("ORG", 0, 1)]
    assert M.conll_entities(["S-PER", "B-LOC", "E-LOC", "S-LOC"]) == [
        ("PER", 0, 1),
        ("LOC", 1, 3),
        ("LOC", 3, 4),
    ]
    assert M.conll_entities([]) == []


def test_conll_scores_by_hand():
    gold = [
        ["B-PER", "I-PER", "O", "B-ORG", "I-ORG", "I-ORG"],
        ["O", "B-LOC", "O"],
        ["B-MISC", "B-MISC"],
    ]
    pred = [
        ["B-PER", "I-PER", "O", "B-ORG", "I-ORG", "O"],  # PER right, ORG one token short
        ["O", "I-LOC", "O"],  # I- after O starts an entity: right
        ["B-MISC", "I-MISC"],  # two gold entities merged: both wrong
    ]
    s = M.conll_scores(gold, pred)
    assert (s["correct_entities"], s["predicted_entities"], s["gold_entities"]) == (2, 4, 5)
    assert s["precision"] == pytest.approx(0.5)
    assert s["recall"] == pytest.approx(0.4)
    assert s["f1"] == pytest.approx(2 * 0.5 * 0.4 / 0.9)
    assert s["accuracy"] == pytest.approx(8 / 11)
    assert s["per_type"]["PER"]["f1"] == 1.0
    assert s["per_type"]["MISC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2}
    # IOB1 gold scored against IOB2 predictions of the same entities: perfect
    assert M.conll_scores([["I-PER", "I-PER", "O", "I-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]])["f1"] == 1.0
    # an entity never continues across a sentence boundary
    assert M.conll_scores([["I-PER"], ["I-PER"]], [["I-PER"], ["I-PER"]])["f1"] == 1.0
    assert M.conll_scores([["O"]], [["O"]])["f1"] == 0.0


def test_glue_metric_sets():
    assert set(M.glue_metrics("CoLA", ["1", "0"], ["1", "0"])) == {"mcc", "accuracy"}
    m = M.glue_metrics("MRPC", ["1", "1", "0"], ["1", "0", "0"])
    assert m["f1"] == pytest.approx(2 / 3) and m["accuracy"] == pytest.approx(2 / 3)
    m = M.glue_metrics("STS-B", [1.0, 2.0, 3.0], [1.5, 2.5, 2.0])
    assert m["spearman"] == pytest.approx(0.5)
    assert M.glue_metrics("SST-2", ["1"], ["1"]) == {"accuracy": 1.0}
