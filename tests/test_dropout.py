"""bertkit's CPU dropout and the attention path that uses it in training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.kernels.attention import _attention_with_dropout
from bertkit.kernels.dropout import Dropout, dropout


def test_identity_when_not_training_or_p_zero():
    x = torch.randn(5, 7)
    assert dropout(x, 0.1, False) is x
    assert dropout(x, 0.0, True) is x
    layer = Dropout(0.3).eval()
    assert torch.equal(layer(x), x)
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drop_rate_scale_and_expectation(p):
    torch.manual_seed(0)
    x = torch.ones(1001, 999)  # numel not a multiple of 4: the last 64-bit word is cut
    y = dropout(x, p, True)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 4e-3  # ~1e6 draws: std ~5e-4
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept, kept[0].item()))
    assert abs(kept[0].item() - 1 / (1 - p)) < 1e-4  # p rounded to 2**-15
    assert abs(y.mean().item() - 1.0) < 1e-2


def test_every_element_position_is_dropped_at_the_same_rate():
    """The four 16-bit lanes of each 64-bit draw (the top one has a bit less) must all be uniform."""
    torch.manual_seed(1)
    y = torch.stack([dropout(torch.ones(4000), 0.25, True) for _ in range(50)])
    rate_per_lane = (y == 0).float().view(50, -1, 4).mean(dim=(0, 1))
    assert torch.all((rate_per_lane - 0.25).abs() < 0.02), rate_per_lane


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.2, True)
    g = torch.randn_like(y)
    y.backward(g)
    keep = y.detach() != 0
    scale = (y.detach()[keep] / x.detach()[keep]).mean()
    torch.testing.assert_close(x.grad, g * keep * scale)


def test_seeded_runs_repeat_and_seeds_differ():
    x = torch.ones(300, 300)
    torch.manual_seed(3)
    a = dropout(x, 0.1, True)
    torch.manual_seed(3)
    b = dropout(x, 0.1, True)
    torch.manual_seed(4)
    c = dropout(x, 0.1, True)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_non_cpu_float32_falls_back_to_torch():
    x = torch.ones(100, 100, dtype=torch.float64)
    y = dropout(x, 0.5, True)
    assert y.dtype == torch.float64 and 0.3 < (y == 0).double().mean() < 0.7


def test_bfloat16_uses_the_same_cheap_mask():
    """Under bf16 autocast the dropouts see bfloat16: they must draw the float32 mask (not fall back to
    the much slower ``bernoulli_``), keep the dtype, and scale as float32 does."""
    x = torch.ones(257, 129)
    torch.manual_seed(7)
    want = dropout(x, 0.1, True)
    torch.manual_seed(7)
    got = dropout(x.bfloat16(), 0.1, True)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got == 0, want == 0)
    torch.testing.assert_close(got.float(), want, rtol=4e-3, atol=0)  # the scale rounded to bfloat16
    torch.manual_seed(7)
    assert not torch.equal(F.dropout(x.bfloat16(), 0.1, True) == 0, want == 0)  # bernoulli_ draws others


def test_bfloat16_attention_dropout_draws_the_cheap_mask(monkeypatch):
    from bertkit.kernels import attention

    seen = []
    monkeypatch.setattr(attention, "dropout", lambda p_, p, training: seen.append(p_.dtype) or p_)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.bfloat16) for _ in range(3))
    out = attention.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    assert seen == [torch.bfloat16] and out.dtype == torch.bfloat16


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_attention_math_equals_sdpa_without_dropout(causal, masked):
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    mask = None
    if masked:
        mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6], dtype=torch.bool)[:, None, None, :]
    ours = _attention_with_dropout(q, k, v, mask, causal, 0.0)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
    if causal and mask is not None:
        tri = torch.ones(6, 6, dtype=torch.bool).tril()
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & tri)
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-6)


def test_attention_dropout_is_unbiased():
    """E[dropout(P)] = P, so averaging many dropout draws recovers the attention without dropout."""
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v)
    draws = torch.stack([_attention_with_dropout(q, k, v, None, False, 0.1) for _ in range(4000)])
    assert not torch.allclose(draws[0], want, atol=1e-3)  # a single draw does drop
    torch.testing.assert_close(draws.mean(0), want, rtol=0, atol=0.02)
