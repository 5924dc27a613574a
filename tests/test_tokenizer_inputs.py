"""Tokenizer input rules, against transformers on real text: an empty second segment is no second segment
(issue 14 item 5), pairs are pre-cut (no unbounded text reaches the library) with results identical to the
uncut ones, lone surrogates and too-small max_length are one-line UserErrors."""

from __future__ import annotations

import random

import pytest

from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def toks(minilm_dir):
    transformers = pytest.importorskip("transformers")
    return Tokenizer.from_pretrained(minilm_dir), transformers.AutoTokenizer.from_pretrained(str(minilm_dir))


@pytest.fixture(scope="module")
def sts_pairs(shared_data):
    from bertkit.tasks.glue import read_glue

    exs = read_glue("STS-B", shared_data / "glue" / "STS-B", "dev")[:300]
    return [e.text_a for e in exs], [e.text_b for e in exs]


def test_empty_second_segment_matches_transformers_and_run_classifier(toks, sts_pairs, minilm_dir):
    ours, ref = toks
    texts, pairs = sts_pairs
    pairs = ["" if i % 3 == 0 else b for i, b in enumerate(pairs)]  # every third pair: an empty line
    want = [ref(a, b)["input_ids"] for a, b in zip(texts, pairs)]
    assert sum(len(w) == len(ref(a)["input_ids"]) for w, a in zip(want, texts)) == 100  # the rule is live
    got = ours(texts, pairs, return_tensors=None, padding=False)["input_ids"]
    assert got == want
    assert [ours.encode(a, b).ids for a, b in zip(texts, pairs)] == want
    assert [e.ids for e in ours.encode_batch(texts, pairs)] == want
    padded = ours(texts[:6], pairs[:6], return_tensors="pt")  # tensors: type ids 0 on the single ones
    assert padded["token_type_ids"][0].sum() == 0 and padded["token_type_ids"][1].sum() > 0

    # the fine-tuning readers' encoder follows run_classifier.py: no tokens in b -> no second [SEP]
    from bertkit.tasks.encoding import encode_pairs

    packed = encode_pairs(ours, texts[:30], [*pairs[:29], "   "], 128)
    assert [ids for ids, _ in packed[:29]] == want[:29]
    assert packed[29][0] == ref(texts[29])["input_ids"]


def _random_pairs(seed: int, n: int):
    rng = random.Random(seed)
    words = ["the", "quick", "Brown", "fox", "unaffable", "naïve", "über", "x", "jumps", "!", "中文", "a.b",
             "antidisestablishmentarianism", "\x00", "\u0301", "[SEP]", "Café"]  # fmt: skip
    sizes = [0, 1, 3, 20, 40, 60, 70, 200]
    return [
        (" ".join(rng.choice(words) for _ in range(rng.choice(sizes))),
         " ".join(rng.choice(words) for _ in range(rng.choice(sizes))))
        for _ in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("max_length", [8, 16, 33, 64, 65])
def test_pre_cut_pairs_truncate_exactly_as_transformers(toks, max_length):
    ours, ref = toks
    pairs = _random_pairs(max_length, 150)
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    got = ours(a, b, max_length=max_length, return_tensors=None, padding=False)["input_ids"]
    want = [ref(x, y, max_length=max_length, truncation=True)["input_ids"] for x, y in pairs]
    assert got == want
    for strategy in ("only_first", "only_second"):
        short = [(x, y) for x, y in pairs if len(ref(y if strategy == "only_first" else x)["input_ids"]) < 5]
        got = ours([x for x, _ in short], [y for _, y in short], max_length=max_length, truncation=strategy,
                   return_tensors=None, padding=False)["input_ids"]  # fmt: skip
        want = [ref(x, y, max_length=max_length, truncation=strategy)["input_ids"] for x, y in short]
        assert got == want


def test_no_unbounded_pair_reaches_the_library(toks, monkeypatch):
    ours, _ = toks
    seen, pair_sides = [], []
    real = ours._encode_routed

    def spy(inputs, *args, **kw):
        for item in inputs:
            (pair_sides if isinstance(item, tuple) else seen).extend(
                item if isinstance(item, tuple) else [item]
            )
        return real(inputs, *args, **kw)

    monkeypatch.setattr(ours, "_encode_routed", spy)
    big = "word " * 100_000  # 500 KB each side
    out = ours([big, "short"], [big + "x", big], max_length=128)
    assert out["input_ids"].shape == (2, 128)
    # the pair truncation (cost ~ product of the lengths) sees a cut of ~128 words, never the 500 KB
    assert pair_sides and max(map(len, pair_sides)) < 5_000
    # single texts are at most chunks of a bounded number of words (counting which side is longer)
    assert max(map(len, seen)) < 25_000


def test_bad_text_and_max_length_are_user_errors(toks):
    ours, _ = toks
    for call in (
        lambda: ours(["ok", "bad \ud800"]),
        lambda: ours(["ok"], ["\udfff"], max_length=16),
        lambda: ours.encode("a\ud800b"),
        lambda: ours.encode_batch(["\ud800"]),
        lambda: ours.tokenize("\udc00"),
        lambda: ours.encode_batch_ids(["x", "\ud800"]),
    ):
        with pytest.raises(UserError, match=r"lone surrogate U\+D[8C]00|U\+DFFF"):
            call()
    with pytest.raises(UserError, match="max_length 1 is too small.*at least 3"):
        ours.encode("hello world", max_length=1)
    with pytest.raises(UserError, match="max_length 3 is too small.*at least 4"):
        ours(["a b"], ["c d"], max_length=3)
    with pytest.raises(UserError, match="max_length must be an integer"):
        ours(["a b"], max_length="7")
    assert ours.encode("hello big world", max_length=3).tokens == ["[CLS]", "hello", "[SEP]"]
    with pytest.raises(TypeError):  # a non-str is a programming error, not the user's input
        ours([b"bytes"])
