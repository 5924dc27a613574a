"""Inference precision (``bertkit embed/serve --precision``, ``SentenceEncoder(precision=...)``): bf16 runs
the model under bf16 autocast with outputs close to fp32's; "auto" takes bf16 only where it measured faster
and its outputs agreed; the choice is cached and overridable; bad values are refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from serving_utils import tiny_dir

from bertkit import inference_precision as IP
from bertkit import tuning
from bertkit.cli import main as cli_main
from bertkit.errors import UserError
from bertkit.heads.finetune import BertForSequenceClassification
from bertkit.model import BertModel
from bertkit.sentence.encoder import SentenceEncoder
from bertkit.serving.service import InferenceService

TEXTS = ["the cat sat on the mat", "a dog", "the movie was very good", "bad"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BERTKIT_INFERENCE_PRECISION", raising=False)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_dir(BertModel, tmp_path_factory.mktemp("tiny"))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_probe_batch_is_drawn_from_the_generator():
    a_ids, a_mask = IP.probe_batch(30522, torch.Generator().manual_seed(3))
    b_ids, _ = IP.probe_batch(30522, torch.Generator().manual_seed(3))
    c_ids, _ = IP.probe_batch(30522, torch.Generator().manual_seed(4))
    assert torch.equal(a_ids, b_ids) and not torch.equal(a_ids, c_ids)
    lengths = a_mask.sum(1)
    assert lengths.min() == 8 and lengths.max() == 128 == a_ids.shape[1] and a_ids.shape[0] == 16
    assert bool((a_ids[a_mask.bool()] >= 1000).all()) and bool((a_ids[~a_mask.bool()] == 0).all())
    small_ids, small_mask = IP.probe_batch(17, torch.Generator().manual_seed(0), max_seq_length=12)
    assert int(small_ids.max()) < 17 and small_mask.sum(1).max() == 12


def test_outputs_agree_judges_every_real_token():
    fp32 = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    ok, worst = IP.outputs_agree(fp32, fp32 + 1e-4 * torch.randn_like(fp32), mask)
    assert ok and worst > 0.999
    off = fp32.clone()
    off[0, 4] = -off[0, 4]  # a padding position: not judged
    assert IP.outputs_agree(fp32, off, mask)[0]
    off[1, 2] = -off[1, 2]  # a real token pointing the other way
    ok, worst = IP.outputs_agree(fp32, off, mask)
    assert not ok and worst == pytest.approx(-1.0, abs=1e-5)


def test_bf16_encoder_runs_under_autocast_close_to_fp32(model_dir):
    fp32 = SentenceEncoder.from_pretrained(model_dir).encode(TEXTS)
    enc = SentenceEncoder.from_pretrained(model_dir, precision="bf16")
    bf16 = enc.encode(TEXTS)
    assert enc.precision_in_use == "bf16" and bf16.dtype == np.float32
    assert not np.array_equal(bf16, fp32)  # the GEMMs did run in bf16
    assert _cosines(bf16, fp32).min() > 0.999
    assert SentenceEncoder.from_pretrained(model_dir).precision_in_use == "fp32"


def test_auto_without_native_bf16_is_fp32_unmeasured(model_dir, monkeypatch):
    monkeypatch.setattr(IP, "_cpu_has_bf16", lambda: False)
    monkeypatch.setattr(tuning, "time_alternating", lambda *a, **k: pytest.fail("nothing may be measured"))
    enc = SentenceEncoder.from_pretrained(model_dir, precision="auto")
    assert enc.precision_in_use == "fp32"
    assert not any(k.startswith("inference_precision") for k in tuning.cached_choices())


@pytest.mark.parametrize(("bf16_ms", "want"), [(50.0, "bf16"), (95.0, "fp32")])
def test_auto_takes_bf16_only_when_at_least_10_percent_faster(model_dir, monkeypatch, bf16_ms, want):
    monkeypatch.setattr(IP, "_cpu_has_bf16", lambda: True)
    monkeypatch.setattr(
        tuning, "time_alternating", lambda options, rounds: {"fp32": 0.1, "bf16": bf16_ms / 1e3}
    )
    enc = SentenceEncoder.from_pretrained(model_dir, precision="auto")
    assert enc.precision_in_use == want
    (entry,) = [
        v for k, v in tuning.cached_choices().items() if k.startswith("inference_precision:BertModel:")
    ]
    assert entry["choice"] == want and entry["details"]["min_token_cosine"] > IP.MIN_TOKEN_COSINE
    assert entry["details"]["bf16_ms"] == bf16_ms
    # cached: a second encoder does not measure again
    monkeypatch.setattr(tuning, "time_alternating", lambda *a, **k: pytest.fail("measured twice"))
    assert SentenceEncoder.from_pretrained(model_dir, precision="auto").precision_in_use == want


def test_auto_keeps_fp32_when_the_outputs_disagree(model_dir, monkeypatch):
    monkeypatch.setattr(IP, "_cpu_has_bf16", lambda: True)
    monkeypatch.setattr(IP, "MIN_TOKEN_COSINE", 1.5)  # no bf16 output can agree now
    monkeypatch.setattr(tuning, "time_alternating", lambda *a, **k: pytest.fail("timed after disagreeing"))
    assert SentenceEncoder.from_pretrained(model_dir, precision="auto").precision_in_use == "fp32"
    (entry,) = [v for k, v in tuning.cached_choices().items() if k.startswith("inference_precision:")]
    assert "disagree" in entry["details"]["reason"]


def test_override_and_bad_values(model_dir, monkeypatch):
    monkeypatch.setenv("BERTKIT_INFERENCE_PRECISION", "bf16")
    assert SentenceEncoder.from_pretrained(model_dir, precision="auto").precision_in_use == "bf16"
    monkeypatch.setenv("BERTKIT_INFERENCE_PRECISION", "fp8")
    with pytest.raises(UserError, match="BERTKIT_INFERENCE_PRECISION must be fp32 or bf16, got 'fp8'"):
        _ = SentenceEncoder.from_pretrained(model_dir, precision="auto").precision_in_use
    with pytest.raises(UserError, match="--precision must be one of fp32, bf16, auto, got 'half'"):
        SentenceEncoder.from_pretrained(model_dir, precision="half")
    with pytest.raises(UserError, match="--precision must be one of"):
        InferenceService(model_dir, precision="fp16")
    with pytest.raises(UserError, match="--int8 and --precision bf16 exclude each other"):
        InferenceService(model_dir, precision="bf16", int8=True)


def test_service_runs_every_head_in_the_chosen_precision(tmp_path):
    cls_dir = tiny_dir(BertForSequenceClassification, tmp_path / "cls", num_labels=3)
    fp32, bf16 = InferenceService(cls_dir), InferenceService(cls_dir, precision="bf16")
    try:
        assert (fp32.info()["precision"], bf16.info()["precision"]) == ("fp32", "bf16")
        a = np.stack(fp32._run("classify", [[2, 5, 6, 3], [2, 7, 3]], [[0] * 4, [0] * 3]))
        b = np.stack(bf16._run("classify", [[2, 5, 6, 3], [2, 7, 3]], [[0] * 4, [0] * 3]))
        assert a.dtype == b.dtype == np.float32 and not np.array_equal(a, b)
        np.testing.assert_allclose(a, b, atol=0.05)
        va, vb = fp32._run("embed", [[2, 5, 6, 3]], [[0] * 4]), bf16._run("embed", [[2, 5, 6, 3]], [[0] * 4])
        assert _cosines(np.stack(va), np.stack(vb)).min() > 0.999 and not np.array_equal(va[0], vb[0])
    finally:
        fp32.close()
        bf16.close()


@pytest.mark.parametrize("long_text", ["truncate", "windows"])
def test_embed_cli_precision(model_dir, tmp_path, capsys, long_text):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    outs = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / f"{precision}-{long_text}.npy"
        args = ["embed", str(model_dir), "--input", str(src), "--out", str(out), "--precision", precision]
        assert cli_main([*args, "--long-text", long_text, "--max-seq-length", "16"]) == 0
        summary = json.loads(capsys.readouterr().out)
        if long_text == "truncate":
            assert summary["precision"] == precision
        outs[precision] = np.load(out)
    assert not np.array_equal(outs["fp32"], outs["bf16"])
    assert _cosines(outs["fp32"], outs["bf16"]).min() > 0.999
    with pytest.raises(SystemExit) as stop:
        cli_main(
            [
                "embed",
                str(model_dir),
                "--input",
                str(src),
                "--out",
                str(tmp_path / "x.npy"),
                "--precision",
                "fp16",
            ]
        )
    assert stop.value.code == 2 and "argument --precision: invalid choice: 'fp16'" in capsys.readouterr().err
