"""Byte-level BPE tokenizer.json (ModernBERT's kind) through bertkit.tokenizer.Tokenizer: ids equal
transformers' AutoTokenizer on the same folder, for single texts, pairs, truncation and padding."""

from __future__ import annotations

import json
import random

import pytest
from bpe_folder import WORDS, build_folder, generated_texts

from bertkit.errors import UserError
from bertkit.tokenizer import BPETokenizer, Tokenizer, end_of_words

transformers = pytest.importorskip("transformers")

HARD_CASES = [
    "",
    "   ",
    "\n\nleading newlines and trailing spaces   ",
    "a [MASK] here and [MASK]there, [CLS] [SEP] [PAD] [UNK] written in text",
    "emoji 😀🎉👍🏽 ❤️ and ﬁ ligature Ⅻ ½",
    "e\u0301 combining, Ａｂｃ fullwidth, zero\u200bwidth, ctrl\x07char",
    "x" * 300,
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("bpe")
    build_folder(path, generated_texts(3000, seed=0))
    return path


@pytest.fixture(scope="module")
def pair(folder):
    return Tokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)


def test_loads_as_bpe_with_the_configs_special_tokens(pair):
    ours, ref = pair
    assert isinstance(ours, BPETokenizer)
    assert (ours.cls_token_id, ours.sep_token_id, ours.pad_token_id, ours.mask_token_id) == (
        ref.cls_token_id,
        ref.sep_token_id,
        ref.pad_token_id,
        ref.mask_token_id,
    )
    assert ours.model_max_length == 64
    assert len(ours) == len(ref)


def test_ids_equal_transformers_on_held_out_texts(pair):
    ours, ref = pair
    texts = generated_texts(500, seed=1) + HARD_CASES  # not the training texts
    got = ours(texts, padding=False, return_tensors=None)["input_ids"]
    assert got == ref(texts)["input_ids"]
    for text in HARD_CASES:
        assert ours.tokenize(text) == ref.tokenize(text)


def test_pairs_truncation_and_padding_equal_transformers(pair):
    ours, ref = pair
    a, b = generated_texts(40, seed=2), generated_texts(40, seed=3)
    assert ours(a, b, padding=False, return_tensors=None)["input_ids"] == ref(a, b)["input_ids"]
    short = [t.split()[0] if t.split() else "x" for t in b]
    for strategy, second in (("longest_first", b), ("only_first", short)):
        got = ours(a, second, max_length=24, truncation=strategy, padding=False, return_tensors=None)
        want = ref(a, second, max_length=24, truncation=strategy)
        assert got["input_ids"] == want["input_ids"], strategy
    got = ours(a, max_length=16, truncation=True)
    want = ref(a, max_length=16, truncation=True, padding=True, return_tensors="pt")
    assert got["input_ids"].tolist() == want["input_ids"].tolist()
    assert got["attention_mask"].tolist() == want["attention_mask"].tolist()


def test_long_texts_cut_keep_their_whitespace(pair):
    """Texts longer than twice the limit are cut before tokenizing: the cut must slice, not re-join words with
    single spaces (byte-level tokens carry newlines and runs of spaces)."""
    ours, ref = pair
    rng = random.Random(4)
    long = [
        "".join(rng.choice(WORDS) + rng.choice(["\n\n", "   ", "\t"]) for _ in range(200)) for _ in range(5)
    ]
    got = ours(long, max_length=40, truncation=True, padding=False, return_tensors=None)["input_ids"]
    assert got == ref(long, max_length=40, truncation=True)["input_ids"]
    short = generated_texts(5, seed=5)
    pairs = ours(long, short, max_length=40, truncation=True, padding=False, return_tensors=None)["input_ids"]
    assert pairs == ref(long, short, max_length=40, truncation=True)["input_ids"]


def test_end_of_words():
    assert end_of_words("a  b\n\nc d", 2) == 4
    assert end_of_words("a b", 2) is None
    assert end_of_words("  a b c", 1) == 3


def test_decode_round_trip(pair):
    ours, ref = pair
    for text in generated_texts(20, seed=6):
        ids = ours.encode(text).ids
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True) == text


def test_save_and_reload(pair, tmp_path):
    ours, ref = pair
    ours.save_pretrained(tmp_path)
    again = Tokenizer.from_pretrained(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = generated_texts(50, seed=7) + HARD_CASES
    want = ref(texts)["input_ids"]
    assert again(texts, padding=False, return_tensors=None)["input_ids"] == want
    assert theirs(texts)["input_ids"] == want


def test_real_corpus_held_out(shared_data, tmp_path):
    """Trained on a slice of the real corpus, compared on other lines of it."""
    from benchmarks.inputs import spread_lines

    lines = spread_lines(4000)
    build_folder(tmp_path, lines[::2], vocab_size=2000)
    ours, ref = Tokenizer.from_pretrained(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    held_out = lines[1::2]
    assert ours(held_out, padding=False, return_tensors=None)["input_ids"] == ref(held_out)["input_ids"]


def test_fast_path_cannot_be_turned_on(pair):
    with pytest.raises(ValueError, match="fast path"):
        pair[0].fast_path = True


def test_missing_special_token_is_one_line(tmp_path):
    build_folder(tmp_path, generated_texts(200, seed=0))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["mask_token"] = "<nope>"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"no mask token in the vocabulary \(looked for '<nope>'"):
        Tokenizer.from_pretrained(tmp_path)


def test_unreadable_tokenizer_json_is_a_user_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": 3}}))
    with pytest.raises(UserError, match="tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path)


def test_word_level_encoding_equals_split_into_words(pair):
    """NER's encoding (each word's pieces, [CLS] ... [SEP]) equals transformers' is_split_into_words=True."""
    from types import SimpleNamespace

    from bertkit.tasks.encoding import encode_tokens

    ours, ref = pair
    for text in generated_texts(30, seed=8):
        words = text.split() or ["x"]
        feature = encode_tokens(ours, [SimpleNamespace(words=words, tags=None)], {}, 512)[0]
        assert feature.input_ids == ref(words, is_split_into_words=True)["input_ids"]
