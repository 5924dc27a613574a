"""``bertkit export onnx --int8``: onnxruntime's dynamic int8 quantisation of the exported graph."""

from __future__ import annotations

import json

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime", reason="export extra not installed: pip install 'bertkit[export]'")
pytest.importorskip("onnx", reason="export extra not installed: pip install 'bertkit[export]'")

from serving_utils import tiny_dir  # noqa: E402

from bertkit.cli import main as cli_main  # noqa: E402
from bertkit.heads.finetune import BertForSequenceClassification  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402


def test_export_int8_smaller_and_sound(tmp_path, capsys):
    model_dir = tiny_dir(BertForSequenceClassification, tmp_path / "cls", intermediate_size=1024)
    assert cli_main(["export", "onnx", str(model_dir), str(tmp_path / "f.onnx")]) == 0
    capsys.readouterr()
    assert cli_main(["export", "onnx", str(model_dir), str(tmp_path / "q.onnx"), "--int8"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["int8"]["float_bytes"] == (tmp_path / "f.onnx").stat().st_size
    assert result["bytes"] == (tmp_path / "q.onnx").stat().st_size < 0.5 * result["int8"]["float_bytes"]
    assert min(result["verify"]["min_cosine"].values()) >= 0.8
    # the int8 graph runs and stays close to the float graph on real token ids
    tok = Tokenizer.from_pretrained(model_dir)
    enc = tok(["the cat sat on the mat", "a very good movie"], return_tensors="np")
    feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    f = ort.InferenceSession(str(tmp_path / "f.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    q = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(q, f, atol=0.05)
    assert not np.array_equal(q, f)  # it is the quantised graph
