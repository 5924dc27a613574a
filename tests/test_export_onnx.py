"""ONNX export: dynamic batch/sequence axes and parity with the PyTorch model (onnxruntime)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("onnx", reason="export extra not installed: pip install 'bertkit[export]'")
ort = pytest.importorskip("onnxruntime", reason="export extra not installed: pip install 'bertkit[export]'")

import onnx  # noqa: E402

from bertkit.cli import main as cli_main  # noqa: E402
from bertkit.config import BertConfig  # noqa: E402
from bertkit.errors import UserError  # noqa: E402
from bertkit.export import export_onnx, reference_outputs  # noqa: E402
from bertkit.heads.finetune import BertForQuestionAnswering, BertForSequenceClassification  # noqa: E402
from bertkit.heads.pretraining import BertForMaskedLM  # noqa: E402
from bertkit.model import BertModel  # noqa: E402


def _save(cls, path, **overrides):
    torch.manual_seed(0)
    model = cls(
        BertConfig.preset("tiny", vocab_size=64, max_position_embeddings=40, num_hidden_layers=2, **overrides)
    )
    with torch.no_grad():  # non-zero biases so a dropped bias shows
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    model.save_pretrained(path)
    return path


def _inputs(batch: int, seq: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 64, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for i in range(batch):
        mask[i, seq - i * 3 :] = 0 if i else 1
    types = (torch.arange(seq) >= seq // 3).long().expand(batch, seq) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types.contiguous()}


@pytest.mark.parametrize(
    "cls,overrides,outputs",
    [
        (BertModel, {}, ["last_hidden_state", "pooler_output"]),
        (BertForSequenceClassification, {"num_labels": 3}, ["logits"]),
        (BertForQuestionAnswering, {}, ["start_logits", "end_logits"]),
        (BertForMaskedLM, {}, ["logits"]),
    ],
)
def test_export_parity_with_dynamic_shapes(tmp_path, capsys, cls, overrides, outputs):
    model_dir = _save(cls, tmp_path / "model", **overrides)
    out = tmp_path / "model.onnx"
    assert cli_main(["export", "onnx", str(model_dir), str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["outputs"] == outputs and result["verify"]["max_abs_diff"]
    graph = onnx.load(str(out)).graph
    for inp in graph.input:  # batch and sequence are symbolic
        dims = inp.type.tensor_type.shape.dim
        assert [d.dim_param for d in dims] == ["batch", "sequence"], inp.name

    model = cls.from_pretrained(model_dir)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for batch, seq in ((1, 5), (4, 23)):  # neither is the export example's (2, 8)
        inputs = _inputs(batch, seq, seed=seq)
        got = session.run(outputs, {k: v.numpy() for k, v in inputs.items()})
        want = reference_outputs(model, inputs)
        real = inputs["attention_mask"].numpy().astype(bool)
        for name, g, w in zip(outputs, got, want):
            assert g.shape == w.shape, name
            if w.ndim >= 2 and w.shape[:2] == real.shape:
                g, w = g[real], w[real]  # padded positions carry no meaning
            np.testing.assert_allclose(g, w, atol=1e-4, rtol=0, err_msg=f"{name} at {batch}x{seq}")


def test_export_errors_leave_nothing(tmp_path):
    model_dir = _save(BertModel, tmp_path / "m")
    with pytest.raises(UserError, match=r"\.onnx"):
        export_onnx(model_dir, tmp_path / "model.bin")
    with pytest.raises(UserError, match="not found"):
        export_onnx(tmp_path / "missing", tmp_path / "x.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
