"""``serve --int8``: which int8 GEMM the weights are packed for, and every engine's outputs against float."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.errors import UserError
from bertkit.heads.finetune import BertForSequenceClassification
from bertkit.serving.int8_engines import ENGINES
from bertkit.serving.quantize import choose_engine, int8_static
from bertkit.serving.routes.embed_all import embed_all
from bertkit.serving.routes.predict import predict
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
            p["probabilities"]["pos"] for p in predict(plain, TEXTS)
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
        pb = [p["probabilities"]["pos"] for p in predict(q, TEXTS)]
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


def test_the_int8_model_is_the_model_with_int8_linears(cls_dir):
    """int8_static swaps the model's own Linear modules (the class and its forward stay), and that forward
    packs the real tokens: the int8 GEMMs see no padding rows."""
    from bertkit.heads.pretraining import BertForMaskedLM
    from bertkit.kernels import Linear, gemm
    from bertkit.serving.quantize import Int8Linear

    model = BertForSequenceClassification.from_pretrained(cls_dir).eval()
    q = int8_static(model, SUPPORTED[0])
    assert type(q) is BertForSequenceClassification
    assert not [n for n, m in q.named_modules() if isinstance(m, torch.nn.Linear)]
    assert q.bert.encoder.layer[0].intermediate.dense.act == model.config.hidden_act  # GELU kept
    rows = []
    q.bert.encoder.layer[0].output.dense.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    ids = torch.randint(5, 17, (4, 11), generator=torch.Generator().manual_seed(1))
    mask = (torch.arange(11)[None] < torch.tensor([11, 3, 7, 1])[:, None]).long()
    with torch.inference_mode():
        logits = q(ids, mask, torch.zeros_like(ids))[0]
        alone = q(ids[2:3, :7], mask[2:3, :7], torch.zeros_like(ids[2:3, :7]))[0]
    tokens = int(mask.sum())
    assert rows[0] == (gemm.bucket(tokens) if gemm.onednn_in_use() else tokens) < ids.numel()
    assert logits.shape == (4, 2) and torch.isfinite(logits).all()
    torch.testing.assert_close(logits[2:3], alone, atol=0.05, rtol=0)  # padding does not change a row much
    # a tied weight stays float: the MLM decoder is the word embeddings
    mlm = BertForMaskedLM(model.config)
    qm = int8_static(mlm, SUPPORTED[0])
    assert isinstance(qm.cls.predictions.decoder, torch.nn.Linear)
    assert isinstance(qm.cls.predictions.transform.dense, Int8Linear)
    assert qm.cls.predictions.decoder.weight is qm.bert.embeddings.word_embeddings.weight
    assert isinstance(mlm.cls.predictions.transform.dense, Linear)  # the float model was not touched


def test_embed_all_runs_the_int8_encoder(cls_dir):
    """/embed_all's per-token states from the int8 copy: same shapes, close to float (cosine > 0.98)."""
    plain, q = InferenceService(cls_dir), InferenceService(cls_dir, int8=True)
    try:
        a, b = embed_all(plain, TEXTS), embed_all(q, TEXTS)
        for x, y in zip(a, b):
            assert x.shape == y.shape and not np.allclose(x, y, atol=1e-6)
            cos = np.sum(x * y, axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
            assert float(cos.min()) > 0.98
    finally:
        plain.close()
        q.close()
