"""ModernBERT folders downstream: ``bertkit info`` describes one, and the sentence encoder (plain folder or a
sentence-transformers folder whose first module is ModernBERT) pools transformers' hidden states."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from bpe_folder import generated_texts, modernbert_folder

from bertkit.architectures import load_encoder, model_type_of
from bertkit.cli import main
from bertkit.modernbert import ModernBertModel
from bertkit.sentence.encoder import SentenceEncoder

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertModel"):
    pytest.skip("this transformers has no ModernBERT", allow_module_level=True)


def test_info_on_a_modernbert_folder(tmp_path, capsys):
    model = modernbert_folder(tmp_path, transformers.ModernBertForMaskedLM)
    assert main(["info", str(tmp_path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model_type"] == "modernbert"
    assert info["config"]["local_attention"] == 16 and info["config"]["global_attn_every_n_layers"] == 2
    # the tied decoder is not stored: every stored tensor counted once
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["heads"] == ["decoder", "head"]
    assert info["vocab_size"] == model.config.vocab_size


def test_load_encoder_picks_the_architecture(tmp_path):
    modernbert_folder(tmp_path)
    assert model_type_of(tmp_path) == "modernbert"
    assert isinstance(load_encoder(tmp_path), ModernBertModel)


def test_sentence_encoder_mean_pools_modernbert(tmp_path):
    """Longer texts than the window, padded batches: equal to mean pooling transformers' hidden states."""
    model = modernbert_folder(tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = generated_texts(12, seed=9) + [" ".join(generated_texts(6, seed=10))]
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    m = enc["attention_mask"][..., None].float()
    want = ((hidden * m).sum(1) / m.sum(1)).numpy()
    assert enc["input_ids"].shape[1] > 16
    got = SentenceEncoder.from_pretrained(tmp_path).encode(texts, batch_size=5)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_sentence_transformers_folder_with_modernbert_first(tmp_path):
    model = modernbert_folder(tmp_path / "st")
    st = tmp_path / "st"
    (st / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {
                    "idx": 2,
                    "name": "2",
                    "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize",
                },
            ]
        )
    )
    (st / "1_Pooling").mkdir()
    (st / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (st / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20}))
    encoder = SentenceEncoder.from_pretrained(st)
    assert encoder.max_seq_length == 20
    texts = generated_texts(4, seed=11)
    got = encoder.encode(texts)
    tok = transformers.AutoTokenizer.from_pretrained(st)
    enc = tok(texts, padding=True, truncation=True, max_length=20, return_tensors="pt")
    with torch.no_grad():
        cls = model(enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state[:, 0]
    want = torch.nn.functional.normalize(cls, dim=-1).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def _classify_files(tmp_path) -> tuple:
    """A task the tiny model learns: does the text mention a river?"""
    rows = []
    for text in generated_texts(160, seed=12):
        label = "yes" if "river" in text.split() else "no"
        rows.append({"text": text.replace("\n", " "), "label": label})
    for name, part in (("train", rows[:120]), ("dev", rows[120:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return tmp_path / "train.jsonl", tmp_path / "dev.jsonl"


def test_finetune_classify_on_modernbert(tmp_path, capsys):
    """bertkit finetune classify takes a ModernBERT folder; transformers loads the result with equal logits;
    --freeze-encoder leaves the encoder's weights as they were; --crf is refused in one line."""
    from safetensors.torch import load_file

    from bertkit.tokenizer import Tokenizer

    modernbert_folder(tmp_path / "base")
    train, dev = _classify_files(tmp_path)
    base = ["finetune", "classify", "--train", str(train), "--dev", str(dev), "--model", str(tmp_path / "base"),
            "--epochs", "4", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "48", "--quiet"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "out")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["final_loss"] < result["first_loss"]
    out = tmp_path / "out" / "model"
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "ModernBertForSequenceClassification"
    ]
    assert ": a fine-tuned ModernBERT\n" in (out / "README.md").read_text()  # the model card's title
    tok = Tokenizer.from_pretrained(out)
    batch = tok(
        ["the river was wide", "naïve café\n\nand more words than the window holds " * 3], max_length=48
    )
    batch.pop("token_type_ids")
    ours = __import__(
        "bertkit.modernbert", fromlist=["x"]
    ).ModernBertForSequenceClassification.from_pretrained(out)
    theirs = transformers.ModernBertForSequenceClassification.from_pretrained(
        out, attn_implementation="sdpa"
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, theirs(**batch).logits, atol=1e-5, rtol=1e-5)

    # bertkit predict on the run's folder: the labels the fine-tuned model's logits give
    assert (
        main(["predict", str(tmp_path / "out"), "--input", str(dev), "--out", str(tmp_path / "pred.jsonl")])
        == 0
    )
    capsys.readouterr()
    rows = [json.loads(x) for x in (tmp_path / "pred.jsonl").read_text().splitlines()]
    dev_texts = [json.loads(x)["text"] for x in dev.read_text().splitlines()]
    enc = tok(dev_texts, max_length=128, truncation=True)
    enc.pop("token_type_ids")
    with torch.no_grad():
        want = theirs(**enc).logits.argmax(-1).tolist()
    assert [r["label"] for r in rows] == [theirs.config.id2label[i] for i in want]

    assert main([*base, "--out", str(tmp_path / "frozen"), "--freeze-encoder"]) == 0
    capsys.readouterr()
    before = load_file(tmp_path / "base" / "model.safetensors")
    after = load_file(tmp_path / "frozen" / "model" / "model.safetensors")
    for key, value in before.items():
        torch.testing.assert_close(after["model." + key], value)


def test_finetune_ner_on_modernbert_and_crf_refused(tmp_path, capsys):
    """Word-level tags through the BPE tokenizer's word ids; the CRF layer (BERT's head only) is refused."""
    modernbert_folder(tmp_path / "base")
    lines = ["-DOCSTART- -X- -X- O", ""]
    for text in generated_texts(60, seed=13):
        words = text.split() or ["river"]
        lines += [f"{w} X X {'B-LOC' if w == 'river' else 'O'}" for w in words] + [""]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    base = ["finetune", "ner", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "train.txt"),
            "--model", str(tmp_path / "base"), "--epochs", "1", "--batch-size", "8", "--max-seq-length", "48",
            "--quiet"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "out")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "f1" in json.dumps(result["metrics"])
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForTokenClassification"]
    assert main([*base, "--out", str(tmp_path / "crf"), "--crf"]) == 2
    err = capsys.readouterr().err
    assert "--crf" in err and "ModernBERT" in err


def test_embed_and_tokenize_commands(tmp_path, capsys):
    model = modernbert_folder(tmp_path / "m")
    texts = [t.replace("\n", " ").strip() or "x" for t in generated_texts(7, seed=14)]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts))
    assert main(["embed", str(tmp_path / "m"), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "v.npy"),
                 "--device", "cpu"]) == 0  # fmt: skip
    capsys.readouterr()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    m = enc["attention_mask"][..., None].float()
    np.testing.assert_allclose(
        np.load(tmp_path / "v.npy"), ((hidden * m).sum(1) / m.sum(1)).numpy(), atol=1e-5
    )

    assert main(["tokenize", str(tmp_path / "m"), texts[0]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ids"] == tok(texts[0])["input_ids"]
    assert out["tokens"] == tok.convert_ids_to_tokens(out["ids"])


@pytest.mark.parametrize(
    "head, outputs",
    [
        (None, ["last_hidden_state"]),
        ("ModernBertForMaskedLM", ["logits"]),
        ("ModernBertForSequenceClassification", ["logits"]),
        ("ModernBertForQuestionAnswering", ["start_logits", "end_logits"]),
    ],
)
def test_export_onnx(tmp_path, head, outputs):
    """The exported graph equals bertkit's model on padded batches longer than the window, within one block of
    the local layers and across several (dynamic axes)."""
    ort = pytest.importorskip("onnxruntime")
    from bertkit.export import export_onnx, load_model

    modernbert_folder(tmp_path / "m", getattr(transformers, head) if head else None)
    result = export_onnx(tmp_path / "m", tmp_path / "m.onnx")
    assert result["inputs"] == ["input_ids", "attention_mask"] and result["outputs"] == outputs
    model = load_model(tmp_path / "m")
    g = torch.Generator().manual_seed(3)
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    for length in (50, 300):  # within one block of the local layers, and several
        ids = torch.randint(5, model.config.vocab_size, (3, length), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 30:] = 0
        mask[2, 7:] = 0
        got = session.run(outputs, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            out = model(ids, attention_mask=mask)
        want = [getattr(out, name) for name in outputs]
        for g_, w in zip(got, want):
            w = w.numpy()
            if w.shape[:2] == tuple(mask.shape):
                g_, w = g_[mask.bool().numpy()], w[mask.bool().numpy()]
            np.testing.assert_allclose(g_, w, atol=1e-4, rtol=1e-4)
