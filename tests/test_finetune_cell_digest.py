"""A fine-tuning cell's `predictions_sha256`: equal for equal predictions (whatever the scores beside them),
different when one example's prediction differs, for the GLUE/NER rows and SQuAD's answers."""

from __future__ import annotations

import json
from pathlib import Path

from lab.experiment.finetune_cells import predictions_digest


def _rows(work: Path, preds: list, probs: list[float]) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"guid": str(i), "pred": p, "gold": "1", "probs": {"0": 1 - q, "1": q}})
        for i, (p, q) in enumerate(zip(preds, probs))
    ]
    (work / "predictions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return work


def test_equal_predictions_give_one_digest_whatever_the_probabilities(tmp_path):
    a = predictions_digest(_rows(tmp_path / "a", ["1", "0", "1"], [0.9, 0.2, 0.7]), "glue")
    b = predictions_digest(_rows(tmp_path / "b", ["1", "0", "1"], [0.6, 0.4, 0.51]), "glue")
    assert a == b and len(a) == 64


def test_one_changed_prediction_or_order_changes_the_digest(tmp_path):
    base = predictions_digest(_rows(tmp_path / "a", ["1", "0", "1"], [0.9, 0.2, 0.7]), "glue")
    flipped = predictions_digest(_rows(tmp_path / "b", ["1", "1", "1"], [0.9, 0.6, 0.7]), "glue")
    reordered = predictions_digest(_rows(tmp_path / "c", ["0", "1", "1"], [0.2, 0.9, 0.7]), "glue")
    assert len({base, flipped, reordered}) == 3


def test_token_tags_are_digested_per_sentence(tmp_path):
    work = tmp_path / "ner"
    work.mkdir()
    rows = [{"index": 0, "words": ["a", "b"], "gold": ["O", "O"], "pred": ["B-PER", "O"]}]
    (work / "predictions.jsonl").write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    first = predictions_digest(work, "ner")
    rows[0]["pred"] = ["O", "B-PER"]
    (work / "predictions.jsonl").write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    assert predictions_digest(work, "ner") != first


def test_squad_answers_are_digested_by_question_id_not_file_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "predictions.json").write_text(json.dumps({"q1": "Paris", "q2": "1889"}), encoding="utf-8")
    (b / "predictions.json").write_text(json.dumps({"q2": "1889", "q1": "Paris"}), encoding="utf-8")
    assert predictions_digest(a, "squad") == predictions_digest(b, "squad")
    (b / "predictions.json").write_text(json.dumps({"q2": "1889", "q1": "France"}), encoding="utf-8")
    assert predictions_digest(a, "squad") != predictions_digest(b, "squad")


def test_a_run_without_predictions_has_no_digest(tmp_path):
    assert predictions_digest(tmp_path, "glue") is None and predictions_digest(tmp_path, "squad") is None
