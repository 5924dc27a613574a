"""The model bertkit pre-trained and keeps under models/ (issue: a model users can take right after cloning),
and lab.publish_model, which puts one there: bf16 weights that load back into fp32 models in bertkit and
transformers alike, a model card whose scores come from result files, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lab.publish_model import MAX_WEIGHTS_BYTES, main, publish

COMMITTED = Path(__file__).resolve().parents[1] / "models" / "bertkit-electra-mini"


def _metrics(path: Path, value: float) -> Path:
    path.write_text(
        json.dumps({"task": "STS-B", "split": "dev", "metrics": {"pearson": value}, "train_examples": 7})
    )
    return path


def test_publish_writes_bf16_weights_that_load_back_and_a_card_from_the_result_files(tiny_model, tmp_path):
    from safetensors.torch import load_file

    from bertkit.model import BertModel

    out = publish(tiny_model, tmp_path / "models" / "tiny", title="A tiny test model", command="bertkit pretrain X",
                  corpus="a test corpus", compute="1 CPU-second",
                  scores=[f"STS-B seed 1={_metrics(tmp_path / 'm.json', 0.4321)}"], notes=["interim"])  # fmt: skip
    weights = load_file(str(out / "model.safetensors"))
    assert {t.dtype for t in weights.values() if t.is_floating_point()} == {torch.bfloat16}
    original = BertModel.from_pretrained(tiny_model).eval()
    small = BertModel.from_pretrained(out).eval()
    assert small.embeddings.word_embeddings.weight.dtype == torch.float32  # loaded back into fp32
    for (name, a), (_, b) in zip(original.state_dict().items(), small.state_dict().items(), strict=True):
        assert torch.equal(a.to(torch.bfloat16).float(), b), name  # only bf16 rounding lost
    card = (out / "README.md").read_text()
    assert "| STS-B seed 1 | pearson 0.432 (dev, 7 training examples) |" in card
    assert "bertkit pretrain X" in card and "interim" in card and "1 CPU-second" in card
    from bertkit.tokenizer import Tokenizer

    # the vocabulary travels in tokenizer.json (no vocab.txt copy): the same ids as the source folder's
    assert not (out / "vocab.txt").exists() and (out / "tokenizer.json").is_file()
    text = ["the cat sat on the mat", "hello"]
    same = Tokenizer.from_pretrained(out)(text)["input_ids"].tolist()
    assert same == Tokenizer.from_pretrained(tiny_model)(text)["input_ids"].tolist()


def test_publish_refuses_bad_inputs_in_one_line_and_leaves_nothing_half_written(tiny_model, tmp_path, capsys):
    out = tmp_path / "models" / "m"
    common = [str(tiny_model), str(out), "--title", "t", "--command", "c", "--corpus", "c", "--compute", "c"]
    assert main([*common, "--scores", "no-equals-sign"]) == 2
    assert "expected LABEL=PATH/metrics.json" in capsys.readouterr().err
    assert main([*common, "--scores", f"x={tmp_path / 'absent.json'}"]) == 2
    assert "absent.json" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps({"loss": 1}))
    assert main([*common, "--scores", f"x={tmp_path / 'bad.json'}"]) == 2
    assert "has no 'metrics'" in capsys.readouterr().err
    assert main([str(tmp_path), str(out), *common[2:]]) == 2
    assert "not a model directory" in capsys.readouterr().err
    assert not out.exists()


def test_weights_over_the_size_limit_are_refused_and_no_folder_is_left(
    tiny_model, tmp_path, monkeypatch, capsys
):
    import lab.publish_model as pm

    monkeypatch.setattr(pm, "MAX_WEIGHTS_BYTES", 1024)
    out = tmp_path / "models" / "m"
    argv = [str(tiny_model), str(out), "--title", "t", "--command", "c", "--corpus", "c", "--compute", "c"]
    assert main(argv) == 2
    assert "MB limit" in capsys.readouterr().err
    assert not out.exists() and list(out.parent.iterdir()) == []  # the temporary folder went too


@pytest.mark.skipif(
    not (COMMITTED / "config.json").is_file(), reason="models/bertkit-electra-mini not committed"
)
def test_the_committed_model_is_small_has_a_card_and_loads_in_bertkit_and_transformers_alike():
    transformers = pytest.importorskip("transformers")
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    assert (COMMITTED / "model.safetensors").stat().st_size <= MAX_WEIGHTS_BYTES
    card = (COMMITTED / "README.md").read_text()
    assert "## Results (dev)" in card and "## How it was made" in card
    tok = Tokenizer.from_pretrained(COMMITTED)
    enc = tok(["the river flows to the sea"], return_tensors="pt")
    ours = BertModel.from_pretrained(COMMITTED).eval()
    theirs = transformers.BertModel.from_pretrained(str(COMMITTED), dtype=torch.float32).eval()
    with torch.no_grad():
        a = ours(**enc).last_hidden_state
        b = theirs(**enc).last_hidden_state
    assert torch.allclose(a, b, atol=1e-4)
