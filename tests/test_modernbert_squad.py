"""SQuAD on a ModernBERT folder: features from the byte-level BPE tokenizer's offsets (the whole context
tokenised once, answers located by characters), `bertkit finetune squad` end to end, and the saved model
equal to transformers' ModernBertForQuestionAnswering."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch
from bpe_folder import generated_texts, modernbert_folder

from bertkit.cli import main
from bertkit.errors import UserError
from bertkit.tasks import squad as S
from bertkit.tasks import squad_bpe
from bertkit.tasks.squad_postprocess import span_text
from bertkit.tasks.squad_train import collate
from bertkit.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertForQuestionAnswering"):
    pytest.skip("this transformers has no ModernBERT", allow_module_level=True)

FEATURES = dict(max_seq_length=48, doc_stride=16, max_query_length=12)


def squad_file(path, v2: bool, seed: int, paragraphs: int = 8) -> dict:
    """Paragraphs of generated text (accents, CJK, emoji, newlines; every 3rd one long enough for several
    windows), each with questions whose answer is a span of one or two whitespace words, at its character
    offset; v2 adds an unanswerable question per paragraph."""
    rng = random.Random(seed)
    articles = []
    for p in range(paragraphs):
        texts = generated_texts(6 if p % 3 == 0 else 1, seed=seed * 100 + p)
        context = " ".join(t.strip() for t in texts) or "river"
        words = list(re.finditer(r"\S+", context))
        qas = []
        for q in range(3):
            i = rng.randrange(len(words))
            j = min(i + rng.randrange(2), len(words) - 1)
            start, end = words[i].start(), words[j].end()
            question = generated_texts(1, seed=seed * 1000 + p * 10 + q)[0].strip() or "what"
            answer = {"text": context[start:end], "answer_start": start}
            qas.append({"id": f"{seed}-{p}-{q}", "question": question + "?", "answers": [answer]})
        if v2:
            qas.append({"id": f"{seed}-{p}-none", "question": "where is nothing?", "answers": [],
                        "is_impossible": True})  # fmt: skip
        articles.append({"title": f"a{p}", "paragraphs": [{"context": context, "qas": qas}]})
    data = {"version": "v2.0" if v2 else "1.1", "data": articles}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return data


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("modernbert") / "base"
    modernbert_folder(path)
    return path


def test_features_come_from_the_whole_context_and_its_offsets(folder, tmp_path):
    """Windows hold transformers' ids of the whole context; every training target decodes to exactly the
    answer text; an answer that fits a window's overlap is in some window; v2's impossible ones target the
    tokenizer's [CLS] at position 0."""
    tok = Tokenizer.from_pretrained(folder)
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    data = squad_file(tmp_path / "train.json", v2=True, seed=1)
    examples, stats = S.read_squad_examples(data, is_training=True, version_2_with_negative=True)
    assert stats.skipped == 0 and stats.impossible == 8
    feats = S.convert_examples_to_features(examples, tok, is_training=True, **FEATURES)
    windows = {}
    for f in feats:
        windows.setdefault(f.example_index, []).append(f)
    assert max(len(w) for w in windows.values()) > 2  # the long paragraphs have several windows
    for i, ex in enumerate(examples):
        doc_ids = hf(ex.context, add_special_tokens=False)["input_ids"]
        for f in windows[i]:
            assert f.input_ids[0] == tok.cls_token_id and f.input_ids[-1] == tok.sep_token_id
            assert f.input_ids[f.doc_offset - 1] == tok.sep_token_id
            assert f.input_ids[f.doc_offset : -1] == doc_ids[f.doc_start : f.doc_start + f.doc_length]
        targets = [(f, f.start_position, f.end_position) for f in windows[i] if f.start_position > 0]
        if ex.is_impossible:
            assert not targets
            continue
        for f, s, e in targets:
            assert span_text(ex, f, s, e) == ex.orig_answer_text
        doc = squad_bpe.bpe_document(tok, ex.context, S.split_context(ex.context)[1])
        first, last = squad_bpe.answer_tokens(doc, *ex.answer_chars)
        overlap = (
            FEATURES["max_seq_length"] - 3 - len(tok.tokenize(ex.question_text)[:12]) - FEATURES["doc_stride"]
        )
        if last - first < overlap:
            assert targets, ex.qas_id


def _with_pair_template(folder, out, pair: str):
    """A copy of ``folder`` whose tokenizer lays out pairs by ``pair`` (a TemplateProcessing string)."""
    import shutil

    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import processors

    shutil.copytree(folder, out)
    rust = RustTokenizer.from_file(str(out / "tokenizer.json"))
    cls_id, sep_id = rust.token_to_id("[CLS]"), rust.token_to_id("[SEP]")
    rust.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair=pair, special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    rust.save(str(out / "tokenizer.json"))
    return out


def test_roberta_pair_layout_builds_the_tokenizers_own_windows(folder, tmp_path):
    """RoBERTa's layout, ``<s> q </s></s> c </s>`` with every segment id 0: each one-window feature equals the
    tokenizer's own encoding of (question, context) in transformers, and the targets still decode to the
    answers."""
    other = _with_pair_template(folder, tmp_path / "roberta-layout", "[CLS] $A [SEP] [SEP] $B [SEP]")
    tok = Tokenizer.from_pretrained(other)
    hf = transformers.AutoTokenizer.from_pretrained(other)
    data = squad_file(tmp_path / "train.json", v2=False, seed=4)
    examples, _ = S.read_squad_examples(data, is_training=True, version_2_with_negative=False)
    feats = S.convert_examples_to_features(examples, tok, is_training=True, **FEATURES)
    sep = tok.sep_token_id
    whole = 0
    for f in feats:
        ex = examples[f.example_index]
        assert f.input_ids[f.doc_offset - 2 : f.doc_offset] == [sep, sep] and f.input_ids[-1] == sep
        assert set(f.token_type_ids) == {0} and len(f.token_type_ids) == len(f.input_ids)
        question = hf(ex.question_text, add_special_tokens=False)["input_ids"]
        context = hf(ex.context, add_special_tokens=False)["input_ids"]
        if len(question) <= FEATURES["max_query_length"] and f.doc_length == len(context):
            whole += 1
            assert f.input_ids == hf(ex.question_text, ex.context)["input_ids"]
        if f.start_position > 0:
            assert span_text(ex, f, f.start_position, f.end_position) == ex.orig_answer_text
    assert whole and any(f.start_position > 0 for f in feats)


def test_a_pair_layout_without_a_separator_is_refused(folder, tmp_path, capsys):
    """Question and context side by side with nothing between them cannot be split into windows: one line,
    exit 2."""
    other = _with_pair_template(folder, tmp_path / "joined", "[CLS] $A $B [SEP]")
    with pytest.raises(UserError, match="SQuAD features need"):
        S.convert_examples_to_features([], Tokenizer.from_pretrained(other))
    squad_file(tmp_path / "d.json", v2=False, seed=2, paragraphs=2)
    argv = ["finetune", "squad", "--model", str(other), "--train", str(tmp_path / "d.json"),
            "--dev", str(tmp_path / "d.json"), "--out", str(tmp_path / "out"), "--quiet"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "special tokens between them" in err[0]


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_finetune_squad_on_modernbert(folder, tmp_path, capsys, version):
    """Trains a few steps, predicts spans that are substrings of their contexts, and the saved model gives
    transformers' logits."""
    v2 = version == "2.0"
    squad_file(tmp_path / "train.json", v2, seed=3)
    dev = squad_file(tmp_path / "dev.json", v2, seed=4, paragraphs=4)
    argv = ["finetune", "squad", "--model", str(folder), "--train", str(tmp_path / "train.json"),
            "--dev", str(tmp_path / "dev.json"), "--out", str(tmp_path / "out"), "--version", version,
            "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "48",
            "--doc-stride", "16", "--max-query-length", "12", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["task"] == f"squad-v{version}" and result["steps"] > 1
    assert result["dev_features"] > result["examples"]  # long contexts: several windows
    assert result["final_loss"] < result["first_loss"]
    out = tmp_path / "out"
    contexts = {qa["id"]: p["context"] for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"]}
    preds = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    assert set(preds) == set(contexts)
    assert all(text in contexts[qid] for qid, text in preds.items())
    if v2:
        assert set(json.loads((out / "null_odds.json").read_text())) == set(contexts)
    else:
        assert all(preds.values())
    nbest = json.loads((out / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert all(e["text"] in contexts[q] or e["text"] == "empty" for q, es in nbest.items() for e in es)

    model_dir = out / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForQuestionAnswering"]
    from bertkit.modernbert import ModernBertForQuestionAnswering

    tok = Tokenizer.from_pretrained(model_dir)
    examples, _ = S.read_squad_examples(dev, is_training=False, version_2_with_negative=v2)
    feats = S.convert_examples_to_features(examples, tok, **FEATURES)[:6]
    batch = collate(feats, tok.pad_token_id, targets=False)
    batch.pop("token_type_ids")
    ours = ModernBertForQuestionAnswering.from_pretrained(model_dir).eval()
    theirs = transformers.ModernBertForQuestionAnswering.from_pretrained(
        model_dir, attn_implementation="sdpa"
    ).eval()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        a, b = ours(**batch), theirs(**batch)
    for name in ("start_logits", "end_logits"):
        torch.testing.assert_close(getattr(a, name)[real], getattr(b, name)[real], atol=1e-5, rtol=1e-5)
