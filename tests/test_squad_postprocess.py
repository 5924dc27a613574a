"""SQuAD post-processing: final-text alignment, n-best selection, v2 null decisions, output files."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from bertkit.tasks import squad as S
from bertkit.tasks import squad_postprocess as P
from bertkit.tasks.squad_metrics import evaluate
from bertkit.tokenizer import Tokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_get_final_text_alignment():
    assert P.get_final_text("steve smith", "Steve Smith's") == "Steve Smith"
    assert P.get_final_text("1895", "(1895-1943).") == "1895"
    assert P.get_final_text("cafe", "Café,") == "Café"  # accents stripped for the comparison only
    assert P.get_final_text("naive", "(Naïve)") == "Naïve"
    assert P.get_final_text("1943 )", "(1895-1943).") == "1943)"
    assert P.get_final_text("xyz", "abc def") == "abc def"  # not found -> the original words
    # a zero-width space is dropped by the basic tokenizer: lengths differ -> the original words
    assert P.get_final_text("ab", "a\u200bb") == "a\u200bb"
    # cased models compare without lower-casing
    assert P.get_final_text("Smith", "Smith's", lowercase=False) == "Smith"
    assert P.get_final_text("smith", "Smith's", lowercase=False) == "Smith's"


def test_detokenize():
    assert P.detokenize(["the", "cat", "##s", "are", "##n", "##t"]) == "the cats arent"
    assert P.detokenize(["##ing", " x "]) == "ing x"


def _reference_basic_tokenizers():
    """transformers' pure-Python BasicTokenizer (a port of the original) and the Rust BertNormalizer +
    BertPreTokenizer of ``tokenizers``."""
    from tokenizers import normalizers, pre_tokenizers

    refs = []
    try:
        from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer
    except ImportError:
        try:
            from transformers.models.bert.tokenization_bert import BasicTokenizer
        except ImportError:
            BasicTokenizer = None
    if BasicTokenizer is not None:
        refs.append(lambda text, lower: BasicTokenizer(do_lower_case=lower).tokenize(text))

    def rust(text, lower):
        norm = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lower
        )
        return [w for w, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(norm.normalize_str(text))]

    refs.append(rust)
    return refs


def test_basic_tokenize_matches_reference(shared_data):
    data = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    contexts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    extra = [
        "H\u00e9llo,\u00a0WORLD!\t\u4e2d\u6587 x\u200by \ufffd ok",
        "a\x00b\x07c  ",
        "\u201cq\u201d\u2014d\u2026",
    ]
    refs = _reference_basic_tokenizers()
    for text in random.Random(0).sample(contexts, 150) + extra:
        for ref in refs:
            assert P.basic_tokenize(text) == ref(text, True)
            assert P.basic_tokenize(text, lowercase=False) == ref(text, False)


# ------------------------------------------------------------------ crafted n-best cases

WORDS = [f"w{i}" for i in range(10)] + ["who"]


@pytest.fixture(scope="module")
def crafted():
    tok = Tokenizer.from_vocab(SPECIALS + WORDS)
    ctx = " ".join(f"w{i % 10}" for i in range(20))  # words 12-13 repeat words 2-3 ("w2 w3")
    data = {
        "version": "x",
        "data": [
            {
                "title": "t",
                "paragraphs": [{"context": ctx, "qas": [{"id": "q", "question": "who", "answers": []}]}],
            }
        ],
    }
    examples, _ = S.read_squad_examples(data, is_training=False)
    # 1 query token -> doc offset 3; 13 - 4 = 9 context tokens per window, stride 5: words 0-8, 5-13, 10-18, 15-19
    feats = S.convert_examples_to_features(examples, tok, max_seq_length=13, doc_stride=5, is_training=False)
    assert [(f.token_to_orig_map[3], len(f.token_to_orig_map)) for f in feats] == [
        (0, 9),
        (5, 9),
        (10, 9),
        (15, 5),
    ]
    return examples, feats


def _logits(feats, spec):
    """Results with -10 everywhere except spec[(feature, 'start'|'end', position)] = value."""
    results = []
    for i, f in enumerate(feats):
        s = np.full(len(f.tokens), -10.0)
        e = np.full(len(f.tokens), -10.0)
        for (fi, which, pos), v in spec.items():
            if fi == i:
                (s if which == "start" else e)[pos] = v
        results.append(P.RawResult(f.unique_id, s.tolist(), e.tolist()))
    return results


def test_nbest_skips_invalid_spans_and_dedupes(crafted):
    examples, feats = crafted
    spec = {
        (0, "start", 1): 30.0, (0, "end", 1): 30.0,  # in the query: invalid
        (0, "start", 10): 25.0,  # word 7 in window 0: window 1 has more context -> invalid as a start
        (0, "start", 5): 5.0, (0, "end", 6): 5.0,  # words 2-3 "w2 w3": score 10
        (0, "end", 4): 9.0,  # end before start for start 5: invalid (start 5 + end 4)
        (1, "start", 5): 4.0, (1, "end", 5): 4.0,  # word 7 in window 1 (max context): "w7", score 8
        (2, "start", 5): 4.5, (2, "end", 6): 4.5,  # words 12-13 = "w2 w3" again: score 9, a duplicate text
        (2, "end", 11): 12.0,  # with start 5: words 12..18, 7 tokens > max_answer_length 3
    }  # fmt: skip
    p = P.compute_predictions(examples, feats, _logits(feats, spec), n_best_size=20, max_answer_length=3)
    nbest = p.nbest["q"]
    assert p.predictions["q"] == "w2 w3"
    texts = [e["text"] for e in nbest]
    assert texts[:2] == ["w2 w3", "w7"] and texts.count("w2 w3") == 1
    assert nbest[0]["start_logit"] == 5.0 and nbest[0]["end_logit"] == 5.0
    assert len(nbest) <= 20 and abs(sum(e["probability"] for e in nbest) - 1) < 1e-9
    assert all(set(e) == {"text", "probability", "start_logit", "end_logit"} for e in nbest)
    assert p.null_odds == {}
    # n_best_size limits the list
    assert len(P.compute_predictions(examples, feats, _logits(feats, spec), n_best_size=2).nbest["q"]) == 2


def test_v2_null_decision_and_threshold(crafted):
    examples, feats = crafted
    spec = {
        (0, "start", 5): 5.0, (0, "end", 6): 5.0,  # best non-null: 10
        (0, "start", 0): 2.0, (0, "end", 0): 1.0,  # null scores per window: 3, 1, 6, -20 -> min is the last
        (1, "start", 0): 0.5, (1, "end", 0): 0.5,
        (2, "start", 0): 3.0, (2, "end", 0): 3.0,
    }  # fmt: skip
    res = _logits(feats, spec)
    p = P.compute_predictions(
        examples, feats, res, version_2_with_negative=True, null_score_diff_threshold=0.0
    )
    assert p.null_odds["q"] == pytest.approx(-20.0 - 10.0)
    assert p.predictions["q"] == "w2 w3"
    null_entries = [e for e in p.nbest["q"] if e["text"] == ""]
    assert len(null_entries) == 1 and null_entries[0]["start_logit"] == -10.0
    # raise the null score of the last window: min null is now window 1 (0.5 + 0.5 = 1)
    spec[(3, "start", 0)] = 20.0
    p = P.compute_predictions(examples, feats, _logits(feats, spec), version_2_with_negative=True)
    assert p.null_odds["q"] == pytest.approx(1.0 - 10.0)
    assert p.predictions["q"] == "w2 w3"
    p_strict = P.compute_predictions(
        examples, feats, _logits(feats, spec), version_2_with_negative=True, null_score_diff_threshold=-9.5
    )
    assert p_strict.predictions["q"] == ""  # -9 > -9.5
    assert P.apply_threshold(p, -9.5) == {"q": ""} and P.apply_threshold(p, -8.0) == {"q": "w2 w3"}


def test_all_null_nbest_does_not_crash(crafted):
    examples, feats = crafted
    res = _logits(feats, {(0, "start", 0): 4.0, (0, "end", 0): 4.0})
    # max_answer_length 0 makes every span invalid: only the null candidate is left
    p = P.compute_predictions(
        examples, feats, res, max_answer_length=0, version_2_with_negative=True, null_score_diff_threshold=1e9
    )
    assert p.predictions["q"] == ""
    assert [e["text"] for e in p.nbest["q"]] == ["", "empty"]
    assert p.null_odds["q"] == pytest.approx(-20.0)  # min null score (-20 in windows 1-3) minus 0
    assert P.apply_threshold(p, 1e9) == {"q": ""}
    # v1.1 with no valid span: the original's nonce prediction
    p1 = P.compute_predictions(examples, feats, res, max_answer_length=0)
    assert p1.predictions["q"] == "empty" and p1.nbest["q"][0]["probability"] == 1.0


def test_write_predictions_files(tmp_path, crafted):
    examples, feats = crafted
    p = P.compute_predictions(examples, feats, _logits(feats, {}), version_2_with_negative=True)
    paths = P.write_predictions(p, tmp_path, version_2_with_negative=True)
    assert sorted(paths) == ["nbest_predictions.json", "null_odds.json", "predictions.json"]
    assert json.loads((tmp_path / "predictions.json").read_text()) == p.predictions
    assert json.loads((tmp_path / "null_odds.json").read_text()) == pytest.approx(p.null_odds)
    assert (
        json.loads((tmp_path / "nbest_predictions.json").read_text())["q"][0]["text"]
        == p.nbest["q"][0]["text"]
    )
    P.write_predictions(p, tmp_path / "v1", version_2_with_negative=False)
    assert not (tmp_path / "v1" / "null_odds.json").exists()


@pytest.mark.parametrize("name,v2", [("dev-v1.1.json", False), ("dev-v2.0-half.json", True)])
def test_oracle_logits_on_real_dev(shared_data, name, v2):
    """Logits that point at the training targets give back near-perfect official scores end to end."""
    tok = Tokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt", lowercase=True)
    path = shared_data / "squad" / name
    data = json.loads(path.read_text(encoding="utf-8"))
    data["data"] = data["data"][:6]  # a slice keeps the test fast
    train_ex, _ = S.read_squad_examples(data, is_training=True, version_2_with_negative=v2)
    eval_ex, _ = S.read_squad_examples(data, is_training=False, version_2_with_negative=v2)
    feats = S.convert_examples_to_features(train_ex, tok, 384, 128, 64, is_training=True)
    results = []
    for f in feats:
        s = np.zeros(len(f.tokens))
        e = np.zeros(len(f.tokens))
        s[f.start_position] += 10.0
        e[f.end_position] += 10.0
        results.append(P.RawResult(f.unique_id, s, e))
    p = P.compute_predictions(
        eval_ex, feats, results, version_2_with_negative=v2, null_score_diff_threshold=0.0
    )
    m = evaluate(data, p.predictions, version="2.0" if v2 else "1.1", na_probs=p.null_odds if v2 else None)
    assert m["f1"] > 99.0 and m["exact"] > 98.5
    if v2:
        assert m["NoAns_exact"] == 100.0 and m["HasAns_f1"] > 98.0
