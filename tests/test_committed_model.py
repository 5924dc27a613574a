"""The model bertkit pre-trained and keeps under models/ (issue: a model users can take right after cloning),
and lab.publish_model, which puts one there: bf16 weights that load back into fp32 models in bertkit and
transformers alike, a model card whose scores come from result files, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lab.publish_model import MAX_WEIGHTS_BYTES, main, publish

COMMITTED = Path(__file__).resolve().parents[1] / "models" / "bertkit-electra-modernbert-mini"


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


def _seed_result(path: Path, primary: float, lr: float = 3e-4) -> Path:
    metrics = {"pearson": round(primary + 0.5, 2), "spearman": primary}
    path.write_text(json.dumps({"task": "STS-B", "primary": primary, "metrics": metrics, "train_examples": 9,
                                "hyperparameters": {"lr": lr, "epochs": 3}}))  # fmt: skip
    return path


def test_seed_rows_give_the_mean_and_sample_spread_of_a_study_cells_seeds(tmp_path):
    from lab.publish_model import seed_rows

    for seed, score in ((1, 70.0), (2, 72.0), (3, 74.0)):
        _seed_result(tmp_path / f"finetune__m__STS-B__seed{seed}.json", score)
    _seed_result(tmp_path / "finetune__m__STS-B__lr0.0001__seed1.json", 10.0)  # a grid cell: not a seed
    rows = seed_rows([f"STS-B={tmp_path / 'finetune__m__STS-B__seed*.json'}"])
    # mean 72.0, sample std 2.0; the metric named is the one equal to the primary score in every file
    assert rows == {"STS-B": "72.0 ± 2.0 (spearman; dev, 3 seeds at lr 0.0003, 9 training examples)"}


def test_seed_rows_refuse_a_lone_file_a_foreign_file_and_mixed_settings(tiny_model, tmp_path, capsys):
    from lab.publish_model import seed_rows

    _seed_result(tmp_path / "a__seed1.json", 70.0)
    common = [str(tiny_model), str(tmp_path / "out"), "--title", "t", "--command", "c", "--corpus", "c",
              "--compute", "c"]  # fmt: skip
    assert main([*common, "--seeds", f"x={tmp_path / 'a__seed*.json'}"]) == 2
    assert "matches 1 file(s)" in capsys.readouterr().err
    (tmp_path / "a__seed2.json").write_text(json.dumps({"metrics": {"f1": 1}}))
    with pytest.raises(Exception, match="a__seed2.json has no 'primary'"):
        seed_rows([f"x={tmp_path / 'a__seed*.json'}"])
    _seed_result(tmp_path / "a__seed2.json", 71.0, lr=1e-4)
    with pytest.raises(Exception, match="mixes tasks or fine-tuning settings"):
        seed_rows([f"x={tmp_path / 'a__seed*.json'}"])
    assert not (tmp_path / "out").exists()


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
    not (COMMITTED / "config.json").is_file(), reason="models/bertkit-electra-modernbert-mini not committed"
)
def test_the_committed_model_is_small_has_a_card_and_loads_in_bertkit_and_transformers_alike():
    transformers = pytest.importorskip("transformers")
    from bertkit.architectures import is_modernbert, load_encoder
    from bertkit.tokenizer import Tokenizer

    assert (COMMITTED / "model.safetensors").stat().st_size <= MAX_WEIGHTS_BYTES
    card = (COMMITTED / "README.md").read_text()
    assert "## Results (dev)" in card and "## How it was made" in card
    assert is_modernbert(COMMITTED)
    tok = Tokenizer.from_pretrained(COMMITTED)
    enc = tok(["the river flows to the sea", "a short one"], padding=True, return_tensors="pt")
    ours = load_encoder(COMMITTED).eval()
    theirs = transformers.AutoModel.from_pretrained(str(COMMITTED), dtype=torch.float32).eval()
    with torch.no_grad():
        a = ours(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        b = theirs(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    real = enc["attention_mask"].bool()
    assert torch.allclose(a[real], b[real], atol=1e-4)
