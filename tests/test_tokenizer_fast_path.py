"""The plain-text fast path (cheap normaliser + one-pass pre-tokenizer) must give exactly what the full
BERT pipeline gives: ids, segment ids, masks, tokens, offsets, word ids, overflow windows, pairs,
truncation and padding, for every normaliser setting, on real text and on crafted edge cases."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer_fast_path import CANDIDATE_RANGES, cut_texts, plain_text

transformers = pytest.importorskip("transformers")

# ASCII cases, each either plain (fast path) or deliberately not (control characters): both kinds must
# come out as the full pipeline makes them, also when mixed in one batch.
EDGE_CASES = [
    "",
    " ",
    "   \t\n  \r\n ",
    "tabs\tand\nnewlines\r\nand\rreturns",
    "vertical\x0btab and form\x0cfeed",
    "nul\x00byte del\x7fete bell\x07 esc\x1b[0m unit\x1fsep",
    "\x01\x02\x03",
    "don't stop-believing... (really?) {yes} <no> $5.00 50% #1 @user a_b `q` ~x^2|y\\z",
    "!!!???...,,,;;;:::---",
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101 + " " + "d" * 250,
    "x" * 99 + "." + "y" * 101,
    "[MASK] is a [CLS] token and [SEP] [PAD] [UNK] but [mask] and [ Mask ] are not",
    "glued[MASK]tokens[SEP]here",
    "MiXeD CaSe WoRdS UNAFFABLE Unaffable",
    "numbers 1234567890 3.14159 1,000,000 0x1F",
    "café naïve résumé",  # not plain for uncased models (accents), plain for cased ones
    "en\u2013dash em\u2014dash \u2018quoted\u2019 \u201cdouble\u201d 5\u00b0C \u00a3100 \u20ac5 x\u2032 \u00a0nbsp",
    "zero\u200bwidth soft\u00adhyphen",  # removed by the full normaliser: never plain
    "ǅ ǆ Ǆ İstanbul ſ ẞ",  # case mappings that change length or differ in context
    "你好 mixed",
    "Ａｂｃ fullwidth",
]

SETTINGS = [
    {"lowercase": True},
    {"lowercase": False},
    {"lowercase": True, "strip_accents": False},
    {"lowercase": False, "strip_accents": True},
    {"lowercase": True, "tokenize_chinese_chars": False},
    {"lowercase": True, "max_input_chars_per_word": 5},
]


def _real_lines(shared_data, n: int) -> list[str]:
    """``n`` real lines spread over every book and the wiki text (``shared_data`` only for the skip)."""
    from benchmarks.inputs import spread_lines

    return spread_lines(n)


def _pair(tok: Tokenizer) -> tuple[Tokenizer, Tokenizer]:
    """The tokenizer (fast path on) and an identical one that always takes the full pipeline."""
    full = Tokenizer.from_vocab(
        tok.ids_to_tokens,
        lowercase=tok.lowercase,
        strip_accents=tok.strip_accents,
        tokenize_chinese_chars=tok.tokenize_chinese_chars,
        max_input_chars_per_word=tok.max_input_chars_per_word,
    )
    full.fast_path = False
    return tok, full


def _fields(enc: Any) -> dict[str, Any]:
    """Everything an Encoding carries, overflow windows included."""
    return {
        "ids": enc.ids,
        "type_ids": enc.type_ids,
        "tokens": enc.tokens,
        "offsets": enc.offsets,
        "word_ids": enc.word_ids,
        "sequence_ids": enc.sequence_ids,
        "attention_mask": enc.attention_mask,
        "special_tokens_mask": enc.special_tokens_mask,
        "overflowing": [_fields(o) for o in enc.overflowing],
    }


def _assert_same(got: list[Any], want: list[Any], texts: list[Any]) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert _fields(a) == _fields(b), f"input {i}: {texts[i]!r}"


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return Tokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def full_minilm(minilm_dir):
    tok = Tokenizer.from_pretrained(minilm_dir)
    tok.fast_path = False
    return tok


@pytest.fixture(scope="module")
def hf_fast(minilm_dir):
    return transformers.BertTokenizerFast.from_pretrained(minilm_dir)


def test_plain_characters_exclude_what_the_normaliser_changes():
    plain = plain_text(True, None, True)
    assert plain.is_plain("Hello, world!\tTabs\r\nand \u2013 dashes \u00b0 \u00a3")
    for c in "\x00\x01\x07\x0b\x0c\x0e\x1b\x1f\x7f\u200b\u00ad\u0301éÉİ你Ａ\ufffd":
        assert not plain.is_plain(f"abc{c}def"), repr(c)
    cased = plain_text(False, None, True)
    assert cased.is_plain("café naïve É")  # nothing strips accents in a cased model
    assert not plain_text(False, True, True).is_plain("café")
    with pytest.raises(TypeError):
        plain.is_plain(b"bytes")


def test_real_corpus_fast_path_equals_full_pipeline(minilm, full_minilm, hf_fast, shared_data):
    lines = _real_lines(shared_data, 10_000)
    plain = [ln for ln in lines if minilm._plain.is_plain(ln)]
    assert len(plain) > 8_000  # the test must exercise the fast path on most lines
    _assert_same(minilm.encode_batch(lines), full_minilm.encode_batch(lines), lines)
    want = hf_fast(lines, return_offsets_mapping=True)
    got = minilm.encode_batch(lines)
    assert [e.ids for e in got] == want["input_ids"]
    assert [e.offsets for e in got] == [[tuple(o) for o in row] for row in want["offset_mapping"]]
    assert [e.word_ids for e in got] == [want.word_ids(i) for i in range(len(lines))]


@pytest.mark.parametrize("max_length,stride", [(16, 4), (64, 0)])
def test_real_corpus_truncation_and_overflow_windows(minilm, full_minilm, shared_data, max_length, stride):
    lines = _real_lines(shared_data, 2_000)
    kw = dict(max_length=max_length, stride=stride)
    _assert_same(minilm.encode_batch(lines, **kw), full_minilm.encode_batch(lines, **kw), lines)


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
def test_real_pairs_truncated_and_padded(minilm, full_minilm, hf_fast, shared_data, strategy):
    lines = _real_lines(shared_data, 1_200)
    # only_first/only_second cannot truncate a pair whose other side alone fills the window
    a, b = lines[0::2], [ln[:80] for ln in lines[1::2]]
    if strategy == "only_second":
        a, b = b, a
    kw = dict(max_length=48, truncation=strategy)
    pairs = list(zip(a, b))
    _assert_same(minilm.encode_batch(a, b, **kw), full_minilm.encode_batch(a, b, **kw), pairs)
    got = minilm(a, b, **kw, return_tensors="pt")
    want = hf_fast(a, b, **kw, padding=True, return_tensors="pt")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(got[key], want[key]), key


def test_edge_cases_single_batched_and_paired(minilm, full_minilm, hf_fast):
    texts = EDGE_CASES
    _assert_same(minilm.encode_batch(texts), full_minilm.encode_batch(texts), texts)
    _assert_same([minilm.encode(t) for t in texts], [full_minilm.encode(t) for t in texts], texts)
    assert [minilm.tokenize(t) for t in texts] == [full_minilm.tokenize(t) for t in texts]
    assert minilm.encode_batch_ids(texts) == full_minilm.encode_batch_ids(texts)
    assert [e.ids for e in minilm.encode_batch(texts)] == hf_fast(texts)["input_ids"]
    rev = texts[::-1]
    pairs = list(zip(texts, rev))
    _assert_same(minilm.encode_batch(texts, rev), full_minilm.encode_batch(texts, rev), pairs)
    _assert_same(
        minilm.encode_batch(texts, rev, max_length=24, stride=3),
        full_minilm.encode_batch(texts, rev, max_length=24, stride=3),
        pairs,
    )


@pytest.mark.parametrize("multiple", [None, 8])
def test_mixed_batch_padded_in_rust_to_the_longest(minilm, full_minilm, hf_fast, multiple):
    """A batch split between the two pipelines must still be padded to the longest of the whole batch."""
    texts = ["short plain", "café " * 30, "plain but rather longer than the first one", ""]
    assert [minilm._plain.is_plain(t) for t in texts] == [True, False, True, True]
    kw: dict[str, Any] = dict(padding=True, pad_to_multiple_of=multiple, return_tensors=None)
    got, want = minilm(texts, **kw), full_minilm(texts, **kw)
    assert got == want
    assert got["input_ids"] == hf_fast(texts, padding=True, pad_to_multiple_of=multiple)["input_ids"]
    enc = minilm.encode_batch(texts, padding=True)
    _assert_same(enc, full_minilm.encode_batch(texts, padding=True), texts)
    assert len({len(e.ids) for e in enc}) == 1
    windows = dict(padding=True, max_length=6, stride=2)  # overflow windows are padded too
    _assert_same(minilm.encode_batch(texts, **windows), full_minilm.encode_batch(texts, **windows), texts)
    fixed = dict(max_length=20, padding="max_length", return_tensors=None)
    assert minilm(texts, **fixed) == full_minilm(texts, **fixed)


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_every_candidate_character_under_every_setting(minilm, settings):
    """Each candidate character (plain or not) in several contexts, through both pipelines."""
    tok, full = _pair(Tokenizer.from_vocab(minilm.ids_to_tokens, **settings))
    texts = []
    for lo, hi in CANDIDATE_RANGES:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            texts.append(f"a{c}b {c} {c}{c}x A{c}\t{c}.{c}{c}")
    texts += EDGE_CASES
    n_plain = sum(tok._plain.is_plain(t) for t in texts)
    assert n_plain > 2_000
    _assert_same(tok.encode_batch(texts), full.encode_batch(texts), texts)
    rev = texts[::-1]
    _assert_same(
        tok.encode_batch(texts, rev, max_length=12, stride=2),
        full.encode_batch(texts, rev, max_length=12, stride=2),
        list(zip(texts, rev)),
    )


@pytest.mark.parametrize("settings", SETTINGS[:4], ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_settings_match_transformers_on_real_text(minilm_dir, minilm, shared_data, tmp_path, settings):
    tok = Tokenizer.from_vocab(minilm.ids_to_tokens, **settings)
    tok.save_pretrained(tmp_path)
    hf = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    lines = _real_lines(shared_data, 3_000) + EDGE_CASES
    assert [e.ids for e in tok.encode_batch(lines)] == hf(lines)["input_ids"]
    got = tok(lines, max_length=32, return_tensors="pt")
    want = hf(lines, max_length=32, truncation=True, padding=True, return_tensors="pt")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(got[key], want[key]), key


@pytest.mark.parametrize("max_length", [3, 8, 16, 128])
def test_call_cuts_plain_texts_after_their_pieces_without_changing_ids(
    minilm, full_minilm, hf_fast, shared_data, max_length
):
    """``__call__`` tokenizes a plain text only up to its (max_length - 2)-th pre-tokenizer piece."""
    lines = _real_lines(shared_data, 3_000)
    n = max_length - 2
    texts = lines + EDGE_CASES
    texts += [
        " ".join(lines[:30]),  # far past the window
        "x," * 200,  # every character a piece
        "a" * 300,  # one long word ([UNK])
        "w " * n + "tail",  # exactly n pieces before the tail
        "w " * (n - 1) + "[MASK] " * 5 + "more words",  # special tokens: cut by words only
        "é " * 20 + "plain " * 200,  # not plain for this model: cut by words only
    ]
    _, cut = cut_texts(texts, max_length, minilm._plain)
    assert len(cut) > (20 if max_length == 128 else 1_000)
    got = minilm(texts, max_length=max_length)
    want = full_minilm(texts, max_length=max_length)
    ref = hf_fast(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(got[key], want[key]), key
        assert torch.equal(got[key], ref[key]), key
