"""SWAG end to end: `finetune swag` on files in the SWAG release's layout learns above chance, and `predict`
runs the saved multiple-choice model on an unlabelled file of the same layout."""

from __future__ import annotations

import csv
import json
import random

import torch

from bertkit.cli import main

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]  # fmt: skip
NOUNS = "man woman dog child player cook driver singer".split()
RIGHT = ["smiles and waves happily", "waves happily at the camera", "nods happily and smiles"]
WRONG = ["falls into the cold river", "drops the heavy box", "runs away from the car", "shouts at the door",
         "sits on the broken chair", "throws the ball far"]  # fmt: skip


def write_swag(path, n: int, rng: random.Random, labelled: bool = True) -> list[int]:
    """Rows of the SWAG release's train/val.csv; the right ending is the one said 'happily'."""
    gold = []
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER if labelled else HEADER[:-1])
        for i in range(n):
            who = rng.choice(NOUNS)
            sent1, sent2 = f"The {who} stands in the park.", f"The {who}"
            endings = rng.sample(WRONG, 3)
            label = rng.randrange(4)
            endings.insert(label, rng.choice(RIGHT))
            row = [i, f"lsmdc{i:04d}", i % 7, f"{sent1} {sent2}", sent1, sent2, "gold", *endings]
            w.writerow(row + [label] if labelled else row)
            gold.append(label)
    return gold


def test_swag_learns_above_chance_and_predict_runs_on_the_model(tmp_path, capsys, minilm_dir):
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
    rng = random.Random(0)
    write_swag(tmp_path / "train.csv", 96, rng)
    write_swag(tmp_path / "val.csv", 32, rng)
    gold = write_swag(tmp_path / "test.csv", 12, rng, labelled=False)

    argv = ["finetune", "swag", "--train", tmp_path / "train.csv", "--dev", tmp_path / "val.csv",
            "--model", model, "--out", tmp_path / "out", "--epochs", 3, "--batch-size", 8, "--lr", 2e-3,
            "--max-seq-length", 32, "--quiet", "--threads", 1]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["task"] == "swag" and res["examples"] == 32
    assert res["metrics"]["accuracy"] >= 0.75  # chance is 0.25
    assert res["final_loss"] < res["first_loss"]
    card = (tmp_path / "out" / "model" / "README.md").read_text()
    assert (
        "pipeline_tag: multiple-choice" in card and f"| accuracy | {res['metrics']['accuracy']:.4g} |" in card
    )

    out = tmp_path / "preds.jsonl"
    argv = ["predict", tmp_path / "out" / "model", "--input", tmp_path / "test.csv", "--out", out]
    assert main([str(a) for a in argv]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"] == "BertForMultipleChoice"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12 and all(len(r["probs"]) == 4 and abs(sum(r["probs"]) - 1) < 1e-4 for r in rows)
    assert sum(r["label"] == g for r, g in zip(rows, gold)) >= 9
