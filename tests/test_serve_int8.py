"""``serve --int8``: which int8 GEMM the weights are packed for, and every engine's outputs against float."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.errors import UserError
from bertkit.heads.finetune import BertForSequenceClassification
from bertkit.serving.quantize import ENGINES, choose_engine, int8_static
from bertkit.serving.service import InferenceService
from tests.serving_utils import tiny_dir

TEXTS = ["the cat sat on the mat", "a dog", "the movie was very very good", "bad", "the cat " * 12]
SUPPORTED = [e for e in ("x86", "fbgemm", "onednn") if e in torch.backends.quantized.supported_engines]


def test_auto_packs_for_onednn_only_with_amx_int8():
    every = ["qnnpack", "onednn", "x86", "fbgemm", "none"]
    assert choose_engine("auto", flags={"avx512f", "amx_int8", "amx_tile"}, supported=every) == "onednn"
    # VNNI alone is not what was measured: keep PyTorch's default engine
    assert choose_engine("auto", flags={"avx512f", "avx512_vnni"}, supported=every) == "x86"
    assert choose_engine("auto", flags={"amx_int8"}, supported=["fbgemm", "none"]) == "fbgemm"
    assert choose_engine("auto", flags=set(), supported=["qnnpack", "none"]) == "qnnpack"
    assert choose_engine("fbgemm", flags={"amx_int8"}, supported=every) == "fbgemm"  # asked for: kept


def test_engine_errors_name_the_choices():
    with pytest.raises(UserError, match="must be one of auto, x86, fbgemm, onednn"):
        choose_engine("mkl")
    with pytest.raises(UserError, match="this torch build has only fbgemm"):
        choose_engine("onednn", supported=["fbgemm", "none"])
    with pytest.raises(UserError, match="no quantised CPU engine"):
        choose_engine("auto", flags=set(), supported=["none"])


def test_cli_offers_the_engines():
    from bertkit.cli import build_parser

    args = build_parser().parse_args(["serve", "m", "--int8", "--int8-engine", "onednn"])
    assert args.int8_engine == "onednn"
    assert set(ENGINES) == {"auto", "x86", "fbgemm", "onednn"}


@pytest.fixture(scope="module")
def cls_dir(tmp_path_factory):
    return tiny_dir(
        BertForSequenceClassification, tmp_path_factory.mktemp("int8") / "cls", id2label={0: "neg", 1: "pos"}
    )


@pytest.fixture(scope="module")
def float_outputs(cls_dir):
    plain = InferenceService(cls_dir)
    try:
        return plain.embed(TEXTS, normalize=True)[0], [
            p["probabilities"]["pos"] for p in plain.predict(TEXTS)
        ]
    finally:
        plain.close()


@pytest.mark.parametrize("engine", SUPPORTED)
def test_every_engine_close_to_float(cls_dir, float_outputs, engine):
    """Bound: cosine of float vs int8 sentence vectors > 0.99, class probabilities within 0.02."""
    a, pa = float_outputs
    q = InferenceService(cls_dir, int8=True, int8_engine=engine)
    try:
        assert q.info()["int8_engine"] == engine
        b, _ = q.embed(TEXTS, normalize=True)
        assert float(np.min(np.sum(a * b, axis=1))) > 0.99
        assert not np.allclose(a, b, atol=1e-6)  # the int8 path ran
        pb = [p["probabilities"]["pos"] for p in q.predict(TEXTS)]
        np.testing.assert_allclose(pa, pb, atol=0.02)
    finally:
        q.close()


def test_packing_leaves_the_process_engine_alone(cls_dir):
    from bertkit.config import BertConfig

    before = torch.backends.quantized.engine
    model = BertForSequenceClassification.from_pretrained(cls_dir)
    for engine in SUPPORTED:
        q = int8_static(model, engine)
        assert q.int8_engine == engine
        assert torch.backends.quantized.engine == before
    assert isinstance(model.config, BertConfig)
    assert isinstance(model.classifier, torch.nn.Linear)  # the float model was not quantised in place


def _run_under(engine: str, q, *inputs):
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        with torch.inference_mode():
            return q(*inputs)[0]
    finally:
        torch.backends.quantized.engine = before


@pytest.mark.skipif(not {"fbgemm", "onednn"} <= set(SUPPORTED), reason="needs fbgemm and onednn")
def test_the_kernel_is_bound_when_packed(tmp_path):
    """Weights packed for oneDNN run oneDNN's GEMM even while the process engine says fbgemm (so the
    server's choice holds whatever else in the process sets the engine)."""
    wide = tiny_dir(BertForSequenceClassification, tmp_path / "wide", hidden_size=256, intermediate_size=1024)
    model = BertForSequenceClassification.from_pretrained(wide)  # wide enough for the kernels to round apart
    x = torch.randint(5, 17, (3, 9), generator=torch.Generator().manual_seed(0))
    inputs = (x, torch.ones_like(x), torch.zeros_like(x))
    onednn = _run_under("onednn", int8_static(model, "onednn"), *inputs)
    fbgemm = _run_under("fbgemm", int8_static(model, "fbgemm"), *inputs)
    if torch.equal(onednn, fbgemm):
        pytest.skip("fbgemm and oneDNN gave bitwise-equal outputs here: nothing tells the kernels apart")
    torch.testing.assert_close(
        _run_under("fbgemm", int8_static(model, "onednn"), *inputs), onednn, rtol=0, atol=0
    )


def test_packed_forward_equals_static_bert_at_real_tokens(cls_dir):
    """The int8 model's computation (Linear layers over the real tokens only) is StaticBert's at every real
    position, in float; padding positions are zeros."""
    from bertkit.export import StaticBert
    from bertkit.serving.quantize import PackedStaticBert

    model = BertForSequenceClassification.from_pretrained(cls_dir).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 17, (6, 11), generator=g)
    mask = torch.ones_like(ids)
    for row, n in enumerate((11, 3, 7, 1, 3, 7)):  # repeated lengths: sequences attended to as one group
        mask[row, n:] = 0
    types = (torch.arange(11) > 4).long().expand(6, 11) * mask
    with torch.inference_mode():
        ref = StaticBert(model).encode(ids, mask, types)
        packed = PackedStaticBert(model).encode(ids, mask, types)
        logits_ref = StaticBert(model)(ids, mask, types)[0]
        logits = PackedStaticBert(model)(ids, mask, types)[0]
    real = mask.bool()
    torch.testing.assert_close(packed[real], ref[real], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(packed[~real]) == 0
    torch.testing.assert_close(logits, logits_ref, rtol=1e-5, atol=1e-5)


def test_embed_all_runs_the_int8_encoder(cls_dir):
    """/embed_all's per-token states from the int8 copy: same shapes, close to float (cosine > 0.98)."""
    plain, q = InferenceService(cls_dir), InferenceService(cls_dir, int8=True)
    try:
        a, b = plain.embed_all(TEXTS), q.embed_all(TEXTS)
        for x, y in zip(a, b):
            assert x.shape == y.shape and not np.allclose(x, y, atol=1e-6)
            cos = np.sum(x * y, axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
            assert float(cos.min()) > 0.98
    finally:
        plain.close()
        q.close()
