"""benchmarks.work_ceiling: the padded-against-real work ratio that bounds what skipping padding can buy."""

from __future__ import annotations

import pytest

from benchmarks.work_ceiling import ceiling_row, model_flops


def test_no_padding_means_no_headroom():
    row = ceiling_row("same lengths", "minilm", [[7, 7, 7], [5, 5]])
    assert row["token_ratio"] == 1.0 and row["flop_ratio"] == 1.0


def test_the_ratio_counts_projection_and_attention_work():
    # one layer, h = 2, f = 4: 2 (4*4 + 2*2*4) = 64 FLOPs a token, 4*2 = 8 a (query, key) pair
    assert model_flops(1, 2, 4, [1, 3], None) == 64 * 4 + 8 * (1 + 9)
    assert model_flops(1, 2, 4, [1, 3], 3) == 64 * 6 + 8 * (9 + 9)
    row = ceiling_row("short and long", "base", [[1, 3]])
    assert row["real_tokens"] == 4 and row["padded_tokens"] == 6 and row["token_ratio"] == 1.5
    # BERT-base's projections dwarf attention at these lengths: the FLOP ratio sits just above the tokens'
    assert 1.5 <= row["flop_ratio"] < 1.51


def test_a_longer_batch_mate_costs_the_reference_more():
    short = ceiling_row("a", "minilm", [[10, 12]])["flop_ratio"]
    long = ceiling_row("b", "minilm", [[10, 120]])["flop_ratio"]
    assert long > short > 1.0
    with pytest.raises(KeyError):
        ceiling_row("c", "no-such-shape", [[1]])
