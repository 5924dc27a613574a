"""bertkit.flops: the one FLOP count of the benchmarks, the experiment runner's ETA and the reports."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bertkit.config import BertConfig
from bertkit.flops import encoder_flops, peak_tflops, training_flops

SHAPE = SimpleNamespace(num_hidden_layers=1, hidden_size=2, intermediate_size=4, vocab_size=10)


def test_encoder_flops_counts_gemms_per_real_token_and_attention_per_sequence():
    # per token 2 x (4 h^2 + 2 h i) = 64; per sequence 4 n^2 h = 8 n^2
    assert encoder_flops(SHAPE, [1, 3]) == 64 * 4 + 8 * (1 + 9)
    assert encoder_flops(SimpleNamespace(**{**vars(SHAPE), "num_hidden_layers": 3}), [1, 3]) == 3 * 336
    assert encoder_flops(SHAPE, [1, 3], passes=3) == 3 * 336
    assert encoder_flops(SHAPE, []) == 0.0


def test_encoder_flops_takes_lists_and_arrays_alike_and_counts_exactly():
    lengths = [128, 77, 512, 3]
    assert encoder_flops(SHAPE, np.array(lengths)) == encoder_flops(SHAPE, lengths)
    assert encoder_flops(SHAPE, np.array(lengths, dtype=np.int32)) == encoder_flops(SHAPE, lengths)
    # beyond 2**53 the count is still the exact integer, rounded once
    base, many = BertConfig.preset("base"), [512] * 300_000
    h, i, layers = base.hidden_size, base.intermediate_size, base.num_hidden_layers
    exact = 3 * layers * (2 * (4 * h * h + 2 * h * i) * 512 * 300_000 + 4 * h * 512 * 512 * 300_000)
    assert exact > 2**53 and encoder_flops(base, many, passes=3) == float(exact)


def test_training_flops_is_three_forwards_of_encoder_pooler_nsp_and_the_masked_rows_head():
    heads = 2 * (2 * 2 * 2 + 2 * 2 * 2)  # two sequences: pooler (2 h^2) and NSP (2 h x 2)
    mlm = 5 * (2 * 2 * 2 + 2 * 2 * 10)  # five masked rows: transform (2 h^2) and decoder (2 h V)
    assert training_flops(SHAPE, [1, 3], masked=5) == 3.0 * (336 + heads + mlm)


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H200", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("Tesla T4", None),
    ],
)
def test_peak_tflops_of_known_gpus(name, peak):
    assert peak_tflops(name) == peak
