"""benchmarks.attention_precision: both training attention paths timed in bf16 and in fp32, each checked first."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import attention_precision
from benchmarks.common import Mismatch


def test_each_path_is_timed_both_ways_after_the_ways_agree_within_bf16_rounding(tmp_path, capsys):
    out = tmp_path / "attention.json"
    state = torch.random.get_rng_state()
    attention_precision.main(["--sizes", "mini", "--batch-size", "2", "--rounds", "1", "--out", str(out)])
    assert torch.equal(torch.random.get_rng_state(), state)  # the dropout draws leave the caller's generator
    report = json.loads(out.read_text())
    assert report["command"].startswith("python -m benchmarks.attention_precision --sizes mini")
    assert [(r["size"], r["path"], r["attention_dropout"]) for r in report["rows"]] == [
        ("mini", "dropout", 0.1),
        ("mini", "fused", 0.0),
    ]
    for row in report["rows"]:
        assert row["shape"] == [2, 4, 128, 64]
        assert row["bf16_ms"] > 0 and row["fp32_ms"] > 0
        assert row["faster"] == min(("bf16", "fp32"), key=lambda w: row[f"{w}_ms"])
        # rounded apart (so the two ways really computed differently), but within bf16 rounding
        assert 0 < row["max_abs_diff_output"] <= attention_precision.BF16_TOLERANCE
        assert 0 < row["max_abs_diff_query_grad"] <= attention_precision.BF16_TOLERANCE
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


def test_a_row_whose_two_ways_disagree_is_refused_before_it_is_timed(monkeypatch):
    monkeypatch.setattr(attention_precision, "BF16_TOLERANCE", 0.0)
    with pytest.raises(Mismatch, match="dropout attention output: max abs difference"):
        attention_precision.measure((2, 4, 128, 64), "dropout", rounds=1)
