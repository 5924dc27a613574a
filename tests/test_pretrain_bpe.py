"""A ModernBERT from scratch on a BPE vocabulary trained here: ``bertkit vocab --kind bpe`` -> ``prepare`` ->
``pretrain --model-config modernbert.json`` -> a folder transformers loads (model and tokenizer) and
``bertkit finetune classify`` takes."""

from __future__ import annotations

import json

import pytest
import torch
from bpe_folder import generated_texts

from bertkit.cli import main
from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertForMaskedLM"):
    pytest.skip("this transformers has no ModernBERT", allow_module_level=True)

SENTENCES = [
    "The river was wide.",
    "naïve café 東京 😀  two  spaces",
    "a [MASK] here",
    "İstanbul, Straße & co.",
]


def _corpus(path):
    texts = [" ".join(t.split()) for t in generated_texts(300, seed=5)]
    lines = []
    for d in range(0, len(texts), 6):
        lines += [t for t in texts[d : d + 6] if t] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _json(path):
    return json.loads(path.read_text(encoding="utf-8"))


def _model_config(path):
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
                 max_position_embeddings=64, local_attention=16, global_attn_every_n_layers=2)  # fmt: skip
    # the released tokenizer's special ids (pad 50283, ...) would be outside this vocabulary: the config's
    # own ids here are wrong on purpose, pretrain must put the data's in their place
    wrong = dict(pad_token_id=7, bos_token_id=8, eos_token_id=9, cls_token_id=8, sep_token_id=9)
    path.write_text(json.dumps({"model_type": "modernbert", "vocab_size": 100, **shape, **wrong}))
    return path


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe-chain")
    corpus = _corpus(d / "corpus.txt")
    common = ["--corpus", str(corpus), "--quiet"]
    assert main(["vocab", "--kind", "bpe", *common, "--vocab-size", "400", "--min-frequency", "1",
                 "--out", str(d / "tokenizer.json")]) == 0  # fmt: skip
    assert main(["prepare", *common, "--vocab", str(d / "tokenizer.json"), "--out", str(d / "data"),
                 "--max-seq-length", "64"]) == 0  # fmt: skip
    return d


def _pretrain(d, out, objective, *extra):
    return main(["pretrain", "--data", str(d / "data"), "--model-config", str(_model_config(d / "mb.json")),
                 "--objective", objective, "--steps", "20", "--batch-size", "8", "--max-seq-length", "64",
                 "--lr", "2e-3", "--valid-documents", "2", "--eval-batches", "1", "--num-threads", "1",
                 "--out", str(out), "--quiet", *extra])  # fmt: skip


@pytest.mark.parametrize("objective", ["mlm", "roberta"])
def test_the_chain_gives_a_folder_transformers_loads(bpe_data, tmp_path, capsys, objective):
    from bertkit.modernbert import ModernBertForMaskedLM

    assert _pretrain(bpe_data, tmp_path / "m", objective) == 0
    model_dir = tmp_path / "m" / "model"
    assert _json(model_dir / "tokenizer.json") == _json(bpe_data / "tokenizer.json")
    card = (model_dir / "README.md").read_text(encoding="utf-8")
    assert f"\n# A ModernBERT pre-trained with bertkit ({objective})\n" in card  # not "A BERT"
    assert not (model_dir / "vocab.txt").exists()
    ours_tok = Tokenizer.from_pretrained(model_dir)
    theirs_tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    for s in SENTENCES:
        assert ours_tok(s)["input_ids"][0].tolist() == theirs_tok(s)["input_ids"]
    pair = ours_tok([SENTENCES[0]], [SENTENCES[1]])["input_ids"][0].tolist()
    assert pair == theirs_tok(SENTENCES[0], SENTENCES[1])["input_ids"]
    # the ids the data was made with are the ones the config names
    config = json.loads((model_dir / "config.json").read_text())
    assert config["vocab_size"] == len(ours_tok) == 400
    assert (config["pad_token_id"], config["cls_token_id"], config["sep_token_id"]) == (
        ours_tok.pad_token_id, ours_tok.cls_token_id, ours_tok.sep_token_id,
    )  # fmt: skip
    assert (config["bos_token_id"], config["eos_token_id"]) == (ours_tok.cls_token_id, ours_tok.sep_token_id)
    assert theirs_tok.mask_token_id == ours_tok.mask_token_id == 4
    assert theirs_tok.model_max_length == ours_tok.model_max_length == 64  # the model's positions

    ours = ModernBertForMaskedLM.from_pretrained(model_dir, sparse_prediction=False)
    theirs = transformers.ModernBertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    batch = theirs_tok(SENTENCES, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        a, b = ours(ids, mask).logits, theirs(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=1e-4, atol=1e-4)
    capsys.readouterr()


def test_finetune_classify_takes_the_folder(bpe_data, tmp_path, capsys):
    assert _pretrain(bpe_data, tmp_path / "m", "mlm") == 0
    rows = [
        {"text": t, "label": "yes" if "river" in t.split() else "no"} for t in generated_texts(40, seed=9)
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["finetune", "classify", "--train", str(train), "--dev", str(train), "--model",
                 str(tmp_path / "m" / "model"), "--epochs", "1", "--batch-size", "8", "--max-seq-length", "48",
                 "--out", str(tmp_path / "c"), "--quiet"]) == 0  # fmt: skip
    out = tmp_path / "c" / "model"
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "ModernBertForSequenceClassification"
    ]
    assert _json(out / "tokenizer.json") == _json(bpe_data / "tokenizer.json")


def test_whole_word_masking_is_refused_on_bpe_data(bpe_data, tmp_path):
    with pytest.raises(UserError, match="whole_word_mask: .*tokenizer.json is a BPE tokenizer"):
        from bertkit.pretrain import PretrainConfig, pretrain

        pretrain(PretrainConfig(data=str(bpe_data / "data"), out=str(tmp_path / "m"), objective="mlm",
                                model_config=str(_model_config(tmp_path / "mb.json")), steps=2, batch_size=4,
                                max_seq_length=64, whole_word_mask=True, progress=False, num_threads=1))  # fmt: skip
