"""The fp32 GEMM backend: oneDNN's forward with torch.mm's backward ("onednn_fwd") computes what F.linear
computes, its backward never calls oneDNN, and the per-machine choice follows the forward and backward
measured apart on feed-forward and vocabulary shapes (fake timings: the routing, not the speed)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from bertkit import kernels, tuning
from bertkit.kernels import gemm


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BERTKIT_CHOICE_CACHE", raising=False)
    monkeypatch.delenv("BERTKIT_ONEDNN", raising=False)
    yield tmp_path / "kernels.json"
    gemm.use_backend(None)


needs_onednn = pytest.mark.skipif(gemm.onednn_op() is None, reason="this torch build has no oneDNN linear")


@pytest.mark.parametrize(
    "forward, backward, step, picked",
    [
        (0.8, 1.3, 1.1, "onednn_fwd"),  # oneDNN's forward wins, its backward loses (a 2-core Xeon)
        (0.5, 0.6, 0.55, "onednn"),  # both win (MKL's generic kernel on AMD EPYC)
        (1.0, 1.2, 1.1, "torch"),
        (0.97, 0.9, 0.93, "onednn"),  # a winning backward needs oneDNN's forward: taken when the step wins
        (1.2, 0.9, 1.0, "torch"),
        (0.96, 0.96, 0.96, "torch"),  # within the margin: the plain path
    ],
)
def test_each_part_runs_where_it_measured_faster(forward, backward, step, picked):
    assert gemm.pick_backend({"forward": forward, "backward": backward, "step": step}) == picked


def test_the_measurement_covers_the_backward_and_the_vocabulary():
    assert any(n_out >= 30000 for _, _, n_out in gemm.MEASURE_SHAPES)  # an MLM decoder
    assert any(n_in > n_out for _, n_in, n_out in gemm.MEASURE_SHAPES)  # a feed-forward's way back


@needs_onednn
def test_the_choice_follows_the_measured_parts(cache, monkeypatch):
    """oneDNN's forward 20% faster, its backward 50% slower (fake times): "onednn_fwd", recorded with the
    ratios; the reverse picks "torch"."""
    fake = {"fwd_onednn": 0.8, "fwd_torch": 1.0, "bwd_onednn": 3.0, "bwd_torch": 2.0}
    timed = []

    def time_alternating(options, rounds, warmup):
        timed.append(set(options))
        return dict(fake)

    monkeypatch.setattr(gemm, "time_alternating", time_alternating)
    assert gemm.decide_linear() == ("onednn_fwd", "measured")
    assert timed == [set(fake)] * len(gemm.MEASURE_SHAPES)  # every shape, forward and backward apart
    details = tuning.cached_choices()["linear"]["details"]
    assert details["onednn_over_torch"] == {"forward": 0.8, "backward": 1.5, "step": 1.267}
    assert gemm.decide_linear() == ("onednn_fwd", "cache")
    fake.update(fwd_onednn=1.1)
    assert gemm.decide_linear(force=True) == ("torch", "measured")


def test_an_older_cache_entry_is_measured_again(cache, monkeypatch):
    """An entry from the single-shape fwd+bwd measurement (no version) or naming an unknown backend does not
    count: measured again and replaced, never a crash."""
    old = {"choice": "onednn", "details": {"onednn": 125.3, "torch": 140.3, "unit": "ms per fwd+bwd"}}
    cache.write_text(json.dumps({tuning.machine_key(): {"linear": old}}))
    monkeypatch.setattr(gemm, "_measure_linear", lambda: ("torch", {"version": gemm.MEASURE_VERSION}))
    assert gemm.decide_linear() == ("torch", "measured")
    assert gemm.decide_linear() == ("torch", "cache")
    bad = {"choice": "fastest", "details": {"version": gemm.MEASURE_VERSION}}
    cache.write_text(json.dumps({tuning.machine_key(): {"linear": bad}}))
    assert gemm.decide_linear() == ("torch", "measured")


@needs_onednn
def test_onednn_fwd_computes_the_forward_on_onednn_and_the_backward_on_mm(cache, monkeypatch):
    real = gemm.onednn_op()
    calls = []

    def op(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(gemm, "onednn_op", lambda: op)
    gemm.use_backend("onednn_fwd")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 37, 64, generator=g, requires_grad=True)  # 111 rows: padded to a bucket forward
    w = torch.randn(96, 64, generator=g, requires_grad=True)
    b = torch.randn(96, generator=g, requires_grad=True)
    grad = torch.randn(3, 37, 96, generator=g)
    y = kernels.linear(x, w, b)
    assert calls == [(gemm.bucket(111), 64)]
    y.backward(grad)
    assert len(calls) == 1  # the backward ran no oneDNN GEMM
    ours = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    F.linear(x, w, b).backward(grad)
    torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    for mine, t in zip(ours, (x, w, b)):
        torch.testing.assert_close(mine, t.grad, rtol=1e-5, atol=1e-5)
    gemm.use_backend("onednn")  # the recorded full-oneDNN backend still runs its backward on oneDNN
    kernels.linear(x, w, b).backward(grad)
    assert len(calls) == 4


@needs_onednn
def test_a_resume_keeps_onednn_fwd(cache, monkeypatch):
    gemm.use_backend("torch")
    gemm.resume_backend("onednn_fwd")
    assert gemm.backend_name() == "onednn_fwd" and gemm.onednn_in_use()
    with pytest.raises(ValueError, match="onednn_fwd"):
        gemm.use_backend("mkl")
