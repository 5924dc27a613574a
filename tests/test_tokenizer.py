"""Tokenizer: identical ids to transformers' fast and slow BERT tokenizers, on real text and hard cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

HARD_CASES = [
    "Héllo wörld! Ça va? naïve café résumé",
    "Straße İstanbul ÅNGSTRÖM Øresund",
    "你好世界 mixed 日本語テキスト 한국어 text",
    "emoji 😀🎉👍🏽 test ❤️",
    "ctrl\x00\x07char\x1b zero\u200bwidth \ufeffbom",
    "soft\u00adhyphen and non\u00a0breaking\u2003spaces",
    "tabs\tand\nnewlines\r\nand\x0bvertical",
    "a" * 150,
    "x" * 99 + " " + "y" * 100 + " " + "z" * 101,
    "",
    "   \t\n  ",
    "[MASK] is a [CLS] token and [SEP] [PAD] [UNK]",
    "don't stop-believing... (really?) {yes} <no> $5.00 50% #1 @user",
    "ﬁ ligature Ⅻ ① ½ ™ ℃",
    "unaffable supercalifragilisticexpialidocious antidisestablishmentarianism",
    "ǅungla Ǆ ǆ ΣΊΣΥΦΟΣ ὈΔΥΣΣΕΎΣ",
    "Ａｂｃ　ｆｕｌｌｗｉｄｔｈ",
    "\u0301combining at start and e\u0301 e\u0300\u0301",
]


@pytest.fixture(scope="module")
def tokenizers_triple(minilm_dir):
    ours = Tokenizer.from_pretrained(minilm_dir)
    fast = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    slow = transformers.BertTokenizer.from_pretrained(minilm_dir)
    return ours, fast, slow


def _real_lines(shared_data, n: int) -> list[str]:
    """``n`` real lines spread over every book and the wiki text (``shared_data`` only for the skip)."""
    from benchmarks.inputs import spread_lines

    return spread_lines(n)


def test_ids_match_both_references_on_real_corpus(tokenizers_triple, shared_data):
    ours, fast, slow = tokenizers_triple
    lines = _real_lines(shared_data, 10_000)
    assert len(lines) == 10_000
    got = ours(lines, padding=False, return_tensors=None)["input_ids"]
    want_fast = fast(lines)["input_ids"]
    assert got == want_fast
    want_slow = slow(lines)["input_ids"]
    mismatches = [i for i, (a, b) in enumerate(zip(got, want_slow)) if a != b]
    assert mismatches == [], f"differs from the slow tokenizer on line {mismatches[:3]}"


def test_pairs_of_real_lines_match(tokenizers_triple, shared_data):
    ours, fast, slow = tokenizers_triple
    lines = _real_lines(shared_data, 600)
    a, b = lines[::2], lines[1::2]
    got = ours(a, b, padding=False, return_tensors=None)
    want = fast(a, b)
    assert got["input_ids"] == want["input_ids"]
    assert got["token_type_ids"] == want["token_type_ids"]
    want_slow = slow(a, b)
    assert got["input_ids"] == want_slow["input_ids"]


@pytest.mark.parametrize("text", HARD_CASES)
def test_hard_cases_match_both_references(tokenizers_triple, text):
    ours, fast, slow = tokenizers_triple
    enc = ours.encode(text)
    assert enc.ids == fast(text)["input_ids"]
    assert enc.ids == slow(text)["input_ids"]
    assert enc.tokens == fast.convert_ids_to_tokens(enc.ids)


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
@pytest.mark.parametrize("max_length", [12, 25])
def test_pair_truncation_matches(tokenizers_triple, strategy, max_length):
    ours, fast, slow = tokenizers_triple
    a = "the first segment is fairly long and has quite a few words in it, unaffable ones"
    b = "while the second one is short but not tiny"
    if strategy == "only_second":
        a = "short first"
    try:
        ref = fast(a, b, max_length=max_length, truncation=strategy)
    except Exception:  # both references refuse a truncation that cannot fit: so must we, clearly
        with pytest.raises(ValueError, match="max_length"):
            ours.encode(a, b, max_length=max_length, truncation=strategy)
        return
    enc = ours.encode(a, b, max_length=max_length, truncation=strategy)
    assert enc.ids == ref["input_ids"]
    assert enc.type_ids == ref["token_type_ids"]
    assert len(enc.ids) <= max_length
    assert enc.ids == slow(a, b, max_length=max_length, truncation=strategy)["input_ids"]


def test_no_truncation_by_default(tokenizers_triple):
    ours, _, _ = tokenizers_triple
    text = "word " * 700
    assert len(ours.encode(text).ids) == 702


def test_batch_padding_and_masks(tokenizers_triple):
    ours, fast, _ = tokenizers_triple
    texts = ["a short one", "a considerably longer sentence than the first one", "mid length text"]
    got = ours(texts)
    want = fast(texts, padding=True, return_tensors="pt")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(got[key], want[key]), key
    fixed = ours(texts, max_length=8, padding="max_length")
    assert fixed["input_ids"].shape == (3, 8)
    assert torch.equal(
        fixed["input_ids"],
        fast(texts, max_length=8, padding="max_length", truncation=True, return_tensors="pt")["input_ids"],
    )
    unpadded = ours(texts, padding=False, return_tensors=None)
    assert [len(x) for x in unpadded["input_ids"]] == [sum(m) for m in got["attention_mask"].tolist()]
    np_out = ours(texts, return_tensors="np")
    assert isinstance(np_out["input_ids"], np.ndarray)


def test_overflowing_windows_with_stride(tokenizers_triple):
    ours, fast, _ = tokenizers_triple
    text = " ".join(f"w{i}" for i in range(40))
    enc = ours.encode(text, max_length=16, stride=4)
    windows = [enc] + list(enc.overflowing)
    ref = fast(text, max_length=16, stride=4, truncation=True, return_overflowing_tokens=True)["input_ids"]
    assert [w.ids for w in windows] == ref
    # consecutive windows overlap by exactly `stride` content tokens
    first, second = windows[0].ids[1:-1], windows[1].ids[1:-1]
    assert first[-4:] == second[:4]


def test_offsets_and_word_ids(tokenizers_triple):
    ours, fast, _ = tokenizers_triple
    text = "Unaffable Héllo, world"
    enc = ours.encode(text)
    ref = fast(text, return_offsets_mapping=True)
    assert [tuple(o) for o in enc.offsets] == [tuple(o) for o in ref["offset_mapping"]]
    assert enc.word_ids == ref.word_ids()
    # every word piece's offsets point at its source characters
    assert text[enc.offsets[1][0] : enc.offsets[1][1]].lower() == "una"


def test_decode_roundtrip(tokenizers_triple):
    ours, fast, _ = tokenizers_triple
    text = "hello, unaffable world! it's 5.00 dollars"
    ids = ours.encode(text).ids
    assert ours.decode(ids) == fast.decode(ids, skip_special_tokens=True)
    assert ours.convert_tokens_to_ids(ours.convert_ids_to_tokens(ids)) == ids


def test_cased_and_accent_settings(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "café", "Cafe", "##s"]
    cased = Tokenizer.from_vocab(vocab, lowercase=False)
    assert cased.tokenize("Cafe café cafes") == ["Cafe", "café", "cafe", "##s"]
    uncased = Tokenizer.from_vocab(vocab, lowercase=True)
    assert uncased.tokenize("Café CAFES") == ["cafe", "cafe", "##s"]
    keep_accents = Tokenizer.from_vocab(vocab, lowercase=True, strip_accents=False)
    assert keep_accents.tokenize("CAFÉ") == ["café"]


def test_wordpiece_greedy_longest_match_and_unk():
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "un",
        "unaff",
        "##aff",
        "##able",
        "##a",
        "##ble",
        "a",
    ]
    tok = Tokenizer.from_vocab(vocab)
    # longest match first: "unaff" beats "un" + "##aff"
    assert tok.tokenize("unaffable") == ["unaff", "##able"]
    # a word that cannot be fully covered becomes one [UNK], not partial pieces
    assert tok.tokenize("unxyz a") == ["[UNK]", "a"]
    long_tok = Tokenizer.from_vocab(vocab, max_input_chars_per_word=5)
    assert long_tok.tokenize("unaffable a") == ["[UNK]", "a"]
    assert Tokenizer.from_vocab(vocab, max_input_chars_per_word=200).tokenize("unaffable") == [
        "unaff",
        "##able",
    ]


def test_both_pipelines_run_one_wordpiece_model(monkeypatch):
    import bertkit.tokenizer as tokenizer_module

    built = []
    real = tokenizer_module.models.WordPiece

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(tokenizer_module.models, "WordPiece", counting)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "a", ","]
    tok = Tokenizer.from_vocab(vocab)
    assert len(built) == 1  # built once from the vocabulary, shared by the full and the plain pipeline
    full = Tokenizer.from_vocab(vocab)
    full.fast_path = False
    tok.fast_path = True
    for text in ("unaffable, a", "unaff\u00e9able a", "a [MASK] un"):
        assert tok.encode(text).ids == full.encode(text).ids


def test_special_tokens_looked_up_by_name():
    vocab = ["hello", "[MASK]", "[SEP]", "[UNK]", "[CLS]", "[PAD]"]
    tok = Tokenizer.from_vocab(vocab)
    assert (tok.mask_token_id, tok.sep_token_id, tok.unk_token_id, tok.cls_token_id, tok.pad_token_id) == (
        1,
        2,
        3,
        4,
        5,
    )
    assert tok.encode("hello there").ids == [4, 0, 3, 2]


def test_missing_special_token_is_a_clear_error(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"vocab.txt.*\[MASK\]"):
        Tokenizer(vocab_file)


def test_non_string_input_names_the_type(tokenizers_triple):
    ours, _, _ = tokenizers_triple
    with pytest.raises(TypeError, match="int"):
        ours.encode(42)
    with pytest.raises(TypeError, match=r"texts\[1\].*NoneType"):
        ours(["ok", None])
    with pytest.raises(TypeError, match="bytes"):
        ours.tokenize(b"bytes")


def test_save_and_reload_roundtrip(tokenizers_triple, tmp_path):
    ours, _, _ = tokenizers_triple
    ours.save_pretrained(tmp_path)
    again = Tokenizer.from_pretrained(tmp_path)
    text = "Héllo unaffable 世界"
    assert again.encode(text).ids == ours.encode(text).ids
    hf = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert hf(text)["input_ids"] == ours.encode(text).ids
    # tokenizer.json alone is enough too
    (tmp_path / "vocab.txt").unlink()
    assert Tokenizer.from_pretrained(tmp_path).encode(text).ids == ours.encode(text).ids


def test_every_code_point_matches_both_references(tokenizers_triple):
    """Each character in a word and alone; a full sweep (0x20-0x2FFFF, 194,528 code points) found no
    case where the slow and fast references disagree, nor where we differ; this keeps a 1-in-7 sample."""
    ours, fast, slow = tokenizers_triple
    texts = [f"a{chr(c)}b {chr(c)}" for c in range(0x20, 0x30000, 7) if not 0xD800 <= c < 0xE000]
    got = ours(texts, padding=False, return_tensors=None)["input_ids"]
    assert got == fast(texts)["input_ids"]
    assert got == slow(texts)["input_ids"]
