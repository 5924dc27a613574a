"""benchmarks.ab_attention: both attention paths are checked equal (to each other and to transformers)
before anything is timed, and a row names each path's ratio."""

from __future__ import annotations

import pytest
import torch

from benchmarks import ab_attention
from benchmarks.common import Mismatch
from bertkit.kernels import attention

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from bertkit.model import BertModel

    cfg = transformers.BertConfig(
        vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny")
    transformers.BertModel(cfg).save_pretrained(path)
    ours = BertModel.from_pretrained(path).eval()
    ref = transformers.BertModel.from_pretrained(path, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([[9, 5, 5, 3, 7, 7], [12, 2, 12, 6, 6, 4]])
    batches = []
    for row in lengths:
        mask = (torch.arange(int(row.max()))[None] < row[:, None]).long()
        ids = torch.randint(5, 60, mask.shape, generator=g) * mask
        batches.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return ours, ref, batches


def test_row_times_both_paths_after_checking_them_equal(pair):
    ours, ref, batches = pair
    row = ab_attention.ab_row(ours, ref, batches, "tiny", rounds=1)
    assert row["batches"] == 2 and set(row["seconds"]) == {"matmul", "sdpa", "transformers"}
    assert set(row["ratio_vs_transformers"]) == {"matmul", "sdpa"}
    speedup = row["seconds"]["sdpa"] / row["seconds"]["matmul"]  # from the rounded seconds
    assert row["matmul_speedup_over_sdpa"] == pytest.approx(speedup, rel=0.05)
    assert attention._choice is attention._UNSET  # the forced path is released


def test_a_path_that_computes_otherwise_is_refused_before_timing(pair, monkeypatch):
    ours, ref, batches = pair
    real = attention._short_attention
    monkeypatch.setattr(attention, "_short_attention", lambda q, k, v: real(q, k, v) * 1.01)
    with pytest.raises(Mismatch, match="matmul vs sdpa"):
        ab_attention.ab_row(ours, ref, batches, "tiny", rounds=1)
