"""Model FLOPs of BERT: the one count the benchmarks (MFU, fraction of the GEMM peak), the experiment runner
(its ETA) and the reports (what BERT-Base as published costs) share.

Model FLOPs are the work a model needs, whoever runs it: the GEMMs of every real token (padding is not model
work) and attention over each sequence's real length; a multiply-add is 2 FLOPs. Element-wise work (LayerNorm,
GELU, softmax, the optimizer) is not counted, as is usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# dense (not sparse-structured) bf16 tensor-core peaks, TFLOP/s, by a substring of the device name (first match)
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("A100", 312.0), ("L4", 121.0))


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a known GPU (``torch.cuda.get_device_name()``), else None."""
    for key, peak in PEAK_BF16_TFLOPS:
        if key in device_name:
            return peak
    return None


def encoder_flops(config: Any, lengths: Sequence[int] | np.ndarray, passes: int = 1) -> float:
    """FLOPs of running the encoder over sequences of these real lengths, ``passes`` times (1: forward; 3:
    forward and backward, the backward being twice the forward).

    config: a BertConfig (or anything with ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``);
    lengths: tokens of each sequence, shape (sequences,). Per token and layer: the QKV, output and feed-forward
    GEMMs, 2 x (4 h^2 + 2 h i); per sequence of n tokens and layer: attention's scores and context, 4 n^2 h.
    Counted in exact integers, rounded once."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    n = np.asarray(lengths, dtype=np.int64).reshape(-1)
    tokens, pairs = int(n.sum()), int((n * n).sum())
    return float(passes * layers * (2 * (4 * h * h + 2 * h * i) * tokens + 4 * h * pairs))


def training_flops(config: Any, lengths: Sequence[int], masked: int) -> float:
    """FLOPs of one pre-training step (forward + backward = 3 x forward): the encoder, the pooler and the
    NSP classifier, and the MLM head (transform and decoder) on the ``masked`` labelled positions only.

    config: a BertConfig; lengths: the real length of each sequence, shape (sequences,). Tested against
    torch's FLOP counter (tests/test_bench_equality.py)."""
    h = config.hidden_size
    heads = len(lengths) * (2 * h * h + 2 * h * 2)  # pooler and the NSP classifier
    mlm = masked * (2 * h * h + 2 * h * config.vocab_size)  # transform and decoder, masked rows only
    return 3.0 * (encoder_flops(config, lengths) + heads + mlm)


def electra_training_flops(config: Any, generator: Any, lengths: Sequence[int], masked: int) -> float:
    """FLOPs of one ELECTRA pre-training step (forward + backward = 3 x forward): the discriminator's encoder and
    its per-token head (dense h x h, then one logit) on every real token, the generator's encoder on every real
    token after the shared embeddings are projected to its width g, and the generator's head (dense g -> h) and
    tied decoder (h -> vocabulary) on the ``masked`` positions only.

    config: the discriminator's BertConfig; generator: the generator's; lengths: the real length of each
    sequence, shape (sequences,). Sampling the replacements is not counted (no GEMM). Tested against torch's
    FLOP counter (tests/test_bench_equality.py)."""
    h, g = config.hidden_size, generator.hidden_size
    tokens = int(np.asarray(lengths, dtype=np.int64).sum())
    discriminator = encoder_flops(config, lengths) + tokens * (2 * h * h + 2 * h)
    generator_side = encoder_flops(generator, lengths) + tokens * 2 * h * g
    generator_side += masked * (2 * g * h + 2 * h * config.vocab_size)
    return 3.0 * (discriminator + generator_side)
