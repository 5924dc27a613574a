"""`finetune classify --multi-label`: BCE over a sigmoid per label, per-label thresholds, micro/macro F1."""

from __future__ import annotations

import json
import random

import pytest
import torch

from bertkit.cli import main
from bertkit.tasks.classify import read_classify
from bertkit.tasks.multilabel import decide, multilabel_metrics, tune_thresholds


def test_metrics_by_hand():
    m = multilabel_metrics(["a", "b", "c"])
    gold = [["a", "b"], ["c"], [], ["a"]]
    pred = [["a"], ["c", "b"], [], ["a", "c"]]
    # a: tp 2; b: fn 1, fp 1; c: tp 1, fp 1 -> micro tp 3 fp 2 fn 1 -> F1 = 6 / 9
    res = m(pred, gold)
    assert res["micro_f1"] == pytest.approx(6 / 9)
    assert res["macro_f1"] == pytest.approx((1.0 + 0.0 + 2 / 3) / 3)
    assert res["subset_accuracy"] == pytest.approx(1 / 4)  # only the empty set is exactly right
    assert m([[]], [[]])["micro_f1"] == 1.0  # nothing to find, nothing found


def test_thresholds_are_tuned_per_label():
    probs = [[0.9, 0.30], [0.8, 0.20], [0.6, 0.25], [0.4, 0.05]]
    gold = [["a", "b"], ["a"], ["a", "b"], []]
    t = tune_thresholds(probs, gold, ["a", "b"])
    assert 0.4 < t[0] <= 0.6 and 0.20 < t[1] <= 0.25  # b's scores are low: its threshold drops below 0.5
    assert [decide(p, ["a", "b"], t) for p in probs] == gold
    assert decide([0.5, 0.49], ["a", "b"]) == ["a"]


def test_label_lists_in_csv_and_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text('text,label\nx,"sports, finance"\ny,\nz,finance\n')
    got = [e.label for e in read_classify(tmp_path / "a.csv", multi_label=True)]
    assert got == [["finance", "sports"], [], ["finance"]]
    (tmp_path / "a.jsonl").write_text('{"text": "x", "label": ["b", "a"]}\n{"text": "y", "label": "c|d"}\n')
    got = [e.label for e in read_classify(tmp_path / "a.jsonl", multi_label=True, label_sep="|")]
    assert got == [["a", "b"], ["c", "d"]]


def _rows(n: int, rng: random.Random) -> list[dict]:
    topics = {
        "sports": ["match", "goal", "team"],
        "finance": ["money", "bank", "price"],
        "film": ["movie", "actor"],
    }
    filler = "the a today news report about this week".split()
    rows = []
    for _ in range(n):
        labels = sorted(t for t in topics if rng.random() < 0.4)
        words = [rng.choice(filler) for _ in range(2)] + [rng.choice(topics[t]) for t in labels]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": labels})
    return rows


def test_multi_label_end_to_end_and_predict(tmp_path, capsys, minilm_dir):
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    model = tmp_path / "tiny"
    BertModel(BertConfig.preset("tiny", vocab_size=len(tok), max_position_embeddings=64)).save_pretrained(
        model
    )
    tok.save_pretrained(model)
    rng = random.Random(1)
    for name, n in (("train", 160), ("dev", 40)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(n, rng)))
    argv = ["finetune", "classify", "--multi-label", "--train", tmp_path / "train.jsonl", "--dev",
            tmp_path / "dev.jsonl", "--model", model, "--out", tmp_path / "out", "--epochs", 6,
            "--batch-size", 8, "--lr", 2e-3, "--max-seq-length", 16, "--quiet", "--threads", 1]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["metrics"]) == {"micro_f1", "macro_f1", "subset_accuracy"}
    assert res["metrics"]["micro_f1"] >= 0.75  # predicting every label scores about 0.57 here
    assert res["tuned"]["metrics"]["micro_f1"] >= res["metrics"]["micro_f1"] - 1e-9
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert set(config["label_thresholds"]) == {"film", "finance", "sports"}
    assert "label_thresholds" in (tmp_path / "out" / "model" / "README.md").read_text()

    (tmp_path / "new.jsonl").write_text('{"text": "the bank price and the goal"}\n{"text": "today news"}\n')
    out = tmp_path / "p.jsonl"
    assert main(["predict", str(tmp_path / "out" / "model"), "--input", str(tmp_path / "new.jsonl"),
                 "--out", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert set(rows[0]["probs"]) == {"film", "finance", "sports"}
    assert rows[0]["labels"] == [
        lab
        for lab in ("film", "finance", "sports")
        if rows[0]["probs"][lab] >= config["label_thresholds"][lab]
    ]
    assert "finance" in rows[0]["labels"] and "film" not in rows[0]["labels"]
    # a pair is scored as a pair and echoed beside its labels, as single-label rows do
    (tmp_path / "pairs.jsonl").write_text('{"text": "the bank price", "text_pair": "and the goal"}\n')
    assert main(["predict", str(tmp_path / "out" / "model"), "--input", str(tmp_path / "pairs.jsonl"),
                 "--out", str(tmp_path / "pairs-out.jsonl")]) == 0  # fmt: skip
    capsys.readouterr()
    (pair,) = [json.loads(x) for x in (tmp_path / "pairs-out.jsonl").read_text().splitlines()]
    assert (pair["text"], pair["text_pair"]) == ("the bank price", "and the goal") and "labels" in pair


def test_multi_label_errors(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("text,label\na,\nb,\n")
    argv = ["finetune", "classify", "--multi-label", "--train", str(tmp_path / "t.csv"), "--dev",
            str(tmp_path / "t.csv"), "--model", str(tmp_path), "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2 and "no labels at all" in capsys.readouterr().err
    assert main([*argv, "--regression"]) == 2 and "exclude each other" in capsys.readouterr().err
