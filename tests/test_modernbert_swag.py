"""SWAG (multiple choice) on a ModernBERT folder: `bertkit finetune swag` trains ModernBertForMultipleChoice,
transformers loads the result with equal logits, and `bertkit predict` runs it."""

from __future__ import annotations

import json
import random

import pytest
import torch
from bpe_folder import modernbert_folder
from test_swag_e2e import write_swag

from bertkit.cli import main
from bertkit.tasks.encoding import collate, encode
from bertkit.tasks.swag import swag_task_data
from bertkit.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertForMultipleChoice"):
    pytest.skip("this transformers has no ModernBertForMultipleChoice", allow_module_level=True)


def test_finetune_swag_on_modernbert(tmp_path, capsys):
    modernbert_folder(tmp_path / "base")
    rng = random.Random(0)
    write_swag(tmp_path / "train.csv", 96, rng)
    write_swag(tmp_path / "val.csv", 24, rng)
    write_swag(tmp_path / "test.csv", 8, rng, labelled=False)
    argv = ["finetune", "swag", "--train", tmp_path / "train.csv", "--dev", tmp_path / "val.csv",
            "--model", tmp_path / "base", "--out", tmp_path / "out", "--epochs", 3, "--batch-size", 8,
            "--lr", 1e-3, "--max-seq-length", 32, "--quiet"]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["task"] == "swag" and result["examples"] == 24
    assert result["final_loss"] < result["first_loss"]
    model_dir = tmp_path / "out" / "model"
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == [
        "ModernBertForMultipleChoice"
    ]

    # the dev choices as the run encoded them ([B, 4, T]), through both implementations
    from bertkit.modernbert import ModernBertForMultipleChoice

    tok = Tokenizer.from_pretrained(model_dir)
    task = swag_task_data(tmp_path / "train.csv", tmp_path / "val.csv")
    batch = collate(encode(task, tok, task.dev[:6], 32), "choice", tok.pad_token_id)
    batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
    assert batch["input_ids"].shape[:2] == (6, 4)
    ours = ModernBertForMultipleChoice.from_pretrained(model_dir).eval()
    theirs = transformers.ModernBertForMultipleChoice.from_pretrained(model_dir, attn_implementation="sdpa")
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, theirs.eval()(**batch).logits, atol=1e-5, rtol=1e-5)

    out = tmp_path / "preds.jsonl"
    assert main([str(a) for a in ["predict", model_dir, "--input", tmp_path / "test.csv", "--out", out]]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"] == "ModernBertForMultipleChoice"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 8 and all(len(r["probs"]) == 4 and abs(sum(r["probs"]) - 1) < 1e-4 for r in rows)
