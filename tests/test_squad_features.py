"""SQuAD reading and windowed feature creation (original BERT algorithm) on crafted and real data."""

from __future__ import annotations

import collections
import json
import random

import pytest

from bertkit.errors import UserError
from bertkit.tasks import squad as S
from bertkit.tasks.squad_metrics import normalize_answer
from bertkit.tasks.squad_postprocess import span_text
from bertkit.tokenizer import Tokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the man went to store and bought a gallon of milk who what when where did buy ( ) . , - "
    "1895 1943 leader was john smith born japan japanese is largest in world electronics industry "
    "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 cat ##s"
).split()


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_vocab(SPECIALS + WORDS)


def squad_data(context: str, qas: list[dict], version: str = "1.1") -> dict:
    return {"version": version, "data": [{"title": "T", "paragraphs": [{"context": context, "qas": qas}]}]}


def qa(qid: str, question: str, context: str, answer: str | None, occurrence: int = 0, **extra) -> dict:
    if answer is None:
        return {"id": qid, "question": question, "answers": [], "is_impossible": True, **extra}
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(answer, start + 1)
    return {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": start}], **extra}


def test_split_context_offsets():
    words, offs = S.split_context("  The  cat\tsat.\u202fOK\n")
    assert words == ["The", "cat", "sat.", "OK"]
    assert offs == [-1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3]


def test_read_aligns_answers_to_words():
    ctx = "The leader was John Smith (1895-1943)."
    data = squad_data(ctx, [qa("q1", "who", ctx, "John Smith"), qa("q2", "when", ctx, "1895")])
    examples, stats = S.read_squad_examples(data, is_training=True)
    assert stats.examples == 2 and stats.skipped == 0
    assert (examples[0].start_position, examples[0].end_position) == (3, 4)
    assert (examples[1].start_position, examples[1].end_position) == (5, 5)  # the word "(1895-1943)."
    assert examples[0].doc_tokens is examples[1].doc_tokens  # one word list per paragraph


def test_read_bad_answers():
    ctx = "The man went to the store."
    bad = squad_data(ctx, [{"id": "qx", "question": "?", "answers": [{"text": "store", "answer_start": 3}]}])
    with pytest.raises(UserError, match=r"qx.*does not match the context at answer_start 3"):
        S.read_squad_examples(bad, is_training=True)
    outside = squad_data(
        ctx, [{"id": "qy", "question": "?", "answers": [{"text": "store", "answer_start": 99}]}]
    )
    with pytest.raises(UserError, match=r"qy.*outside the context"):
        S.read_squad_examples(outside, is_training=True)
    # Matches at its offset, but the word ("a\u00a0b" is one word: U+00A0 is not a separator) does not
    # contain the whitespace-normalised answer "a b": skipped with a warning, as the original.
    ctx2 = "x a\u00a0b y"
    odd = squad_data(ctx2, [qa("qz", "?", ctx2, "a\u00a0b"), qa("ok", "?", ctx2, "y")])
    examples, stats = S.read_squad_examples(odd, is_training=True)
    assert stats.skipped == 1 and [e.qas_id for e in examples] == ["ok"]
    # Evaluation mode does not look at answer offsets at all.
    assert S.read_squad_examples(bad, is_training=False)[1].examples == 1
    with pytest.raises(UserError, match="'data' list"):
        S.read_squad_examples({"version": "1.1"}, is_training=False)


def test_read_v2_impossible():
    ctx = "The man went to the store."
    data = squad_data(ctx, [qa("a", "?", ctx, "store"), qa("b", "?", ctx, None)], "v2.0")
    examples, stats = S.read_squad_examples(data, is_training=True, version_2_with_negative=True)
    assert stats.impossible == 1
    assert (
        examples[1].is_impossible and examples[1].start_position == -1 and examples[1].orig_answer_text == ""
    )
    # v1.1 reading of an answerless question in training is a clear error
    with pytest.raises(UserError, match="'answers' is empty"):
        S.read_squad_examples(data, is_training=True, version_2_with_negative=False)


def test_doc_windows_stride_is_a_step():
    assert S.doc_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert S.doc_windows(10, 4, 5) == [(0, 4), (4, 4), (8, 2)]  # step never exceeds the window
    assert S.doc_windows(3, 4, 2) == [(0, 3)]
    assert S.doc_windows(0, 4, 2) == []
    with pytest.raises(UserError, match="max-seq-length"):
        S.doc_windows(10, 0, 2)


def test_max_context_rule():
    # "the man went to the store and bought a gallon of milk": span B = tokens 3..7, C = 6..10.
    spans = [(0, 5), (3, 5), (6, 5), (9, 3)]
    assert S.is_max_context(spans, 2, 7)  # "bought": 1 left/3 right in C beats 4 left/0 right in B
    assert not S.is_max_context(spans, 1, 7)
    assert S.is_max_context(spans, 1, 5)
    # ties are won by the first window; the 0.01*length bonus prefers longer windows
    assert S.is_max_context([(0, 4), (2, 4)], 0, 2)  # 2: min(2,1)+0.04 in window 0 vs min(0,3)+0.04
    assert S.is_max_context([(0, 5), (2, 5)], 0, 3)  # 3: 1.05 in both windows: the first wins
    assert S.is_max_context([(0, 5), (2, 3)], 0, 3)  # 3: 1.05 vs min(1,1)+0.03
    # the per-document shortcut equals the per-token rule everywhere
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 40)
        spans = S.doc_windows(n, rng.randint(1, 12), rng.randint(1, 12))
        best = S._max_context_flags(spans, n)
        for i, (start, length) in enumerate(spans):
            for pos in range(start, start + length):
                assert (best[pos] == i) == S.is_max_context(spans, i, pos)


def test_improve_answer_span(tok):
    doc = tok.tokenize("The leader was John Smith (1895-1943).")
    start, end = doc.index("("), doc.index(".")  # the whole word "(1895-1943)."
    assert S.improve_answer_span(doc, start, end, tok.tokenize("1895")) == (start + 1, start + 1)
    doc2 = tok.tokenize("the japanese electronics industry")
    assert S.improve_answer_span(doc2, 1, 1, tok.tokenize("Japan")) == (1, 1)  # no better match


def _window_text(tokens, feature):
    return [feature.tokens[i] for i in sorted(feature.token_to_orig_map)]


def test_windows_layout_and_answer_split_across_windows(tok):
    ctx = " ".join(f"w{i}" for i in range(20))  # one token per word
    question = "who what when where did buy"  # 6 tokens, truncated to 4
    q = qa("q", question, ctx, "w6 w7 w8")
    examples, _ = S.read_squad_examples(squad_data(ctx, [q]), is_training=True)
    # max_seq_length 13 -> 13 - 4 - 3 = 6 context tokens per window; stride 4: windows 0-5, 4-9, 8-13, 12-17, 16-19
    feats = S.convert_examples_to_features(
        examples, tok, max_seq_length=13, doc_stride=4, max_query_length=4, is_training=True
    )
    assert [f.doc_span_index for f in feats] == [0, 1, 2, 3, 4]
    f0 = feats[0]
    assert f0.tokens[:6] == ["[CLS]", "who", "what", "when", "where", "[SEP]"]
    assert f0.tokens[-1] == "[SEP]" and len(f0.tokens) == 13
    assert f0.token_type_ids == [0] * 6 + [1] * 7
    assert f0.input_ids == tok.convert_tokens_to_ids(f0.tokens)
    assert [f0.token_to_orig_map[i] for i in range(6, 12)] == [0, 1, 2, 3, 4, 5]
    assert [feats[1].token_to_orig_map[i] for i in range(6, 12)] == [4, 5, 6, 7, 8, 9]
    assert feats[-1].tokens[6:-1] == ["w16", "w17", "w18", "w19"]
    # answer w6..w8 is wholly inside window 1 only (window 0 ends at w5, window 2 starts at w8)
    assert [(f.start_position, f.end_position) for f in feats] == [(0, 0), (8, 10), (0, 0), (0, 0), (0, 0)]
    assert feats[1].tokens[8:11] == ["w6", "w7", "w8"]
    # max context: w5 is in windows 0 (left 5, right 0) and 1 (left 1, right 4) -> window 1
    assert feats[0].token_is_max_context[11] is False and feats[1].token_is_max_context[7] is True
    # every context token has exactly one max-context window
    owners = collections.Counter(
        f.token_to_orig_map[p] for f in feats for p, m in f.token_is_max_context.items() if m
    )
    assert sorted(owners) == list(range(20)) and set(owners.values()) == {1}
    # unique ids run on across examples
    assert [f.unique_id for f in feats] == list(range(1000000000, 1000000005))


def test_subword_mapping_and_improved_span(tok):
    ctx = "The leader was John Smith (1895-1943). cats"
    examples, _ = S.read_squad_examples(
        squad_data(ctx, [qa("q", "when born", ctx, "1895")]), is_training=True
    )
    (f,) = S.convert_examples_to_features(examples, tok, max_seq_length=64, doc_stride=16, is_training=True)
    assert f.tokens[f.start_position : f.end_position + 1] == ["1895"]
    assert f.tokens[-3:] == ["cat", "##s", "[SEP]"]
    n = len(f.tokens)
    assert f.token_to_orig_map[n - 3] == f.token_to_orig_map[n - 2] == 6  # both pieces map to word "cats"
    assert span_text(examples[0], f, f.start_position, f.end_position) == "1895"


def test_impossible_and_out_of_window_targets(tok):
    ctx = " ".join(f"w{i}" for i in range(12))
    data = squad_data(ctx, [qa("a", "who", ctx, "w10 w11"), qa("b", "what", ctx, None)], "v2.0")
    examples, _ = S.read_squad_examples(data, is_training=True, version_2_with_negative=True)
    feats = S.convert_examples_to_features(examples, tok, max_seq_length=9, doc_stride=3, is_training=True)
    a = [(f.start_position, f.end_position) for f in feats if f.example_index == 0]
    b = [(f.start_position, f.end_position) for f in feats if f.example_index == 1]
    assert a[:-1] == [(0, 0)] * (len(a) - 1) and a[-1] == (4, 5)
    assert b == [(0, 0)] * len(b) and all(f.is_impossible for f in feats if f.example_index == 1)
    # evaluation features carry no targets
    eval_feats = S.convert_examples_to_features(
        examples, tok, max_seq_length=9, doc_stride=3, is_training=False
    )
    assert all(f.start_position is None for f in eval_feats)


@pytest.mark.parametrize("name,v2", [("dev-v1.1.json", False), ("dev-v2.0-half.json", True)])
def test_real_dev_answers_recoverable(shared_data, name, v2):
    """Every answerable question has a window whose start/end targets give back its answer."""
    tok = Tokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt", lowercase=True)
    data = json.loads((shared_data / "squad" / name).read_text(encoding="utf-8"))
    data["data"] = data["data"][:24]  # half of v1.1 (all 16 articles of the v2 half) keeps the test fast
    examples, stats = S.read_squad_examples(data, is_training=True, version_2_with_negative=v2)
    assert stats.skipped == 0 and stats.examples == sum(
        len(p["qas"]) for a in data["data"] for p in a["paragraphs"]
    )
    feats = S.convert_examples_to_features(examples, tok, 384, 128, 64, is_training=True)
    assert all(len(f.input_ids) <= 384 for f in feats)
    assert any(f.doc_span_index > 0 for f in feats)  # long contexts do get several windows
    by_ex = collections.defaultdict(list)
    for f in feats:
        by_ex[f.example_index].append(f)
    exact = contained = 0
    answerable = 0
    for i, ex in enumerate(examples):
        if ex.is_impossible:
            assert all(f.start_position == 0 for f in by_ex[i])
            continue
        answerable += 1
        texts = [span_text(ex, f, f.start_position, f.end_position) for f in by_ex[i] if f.start_position > 0]
        assert texts, ex.qas_id
        gold = normalize_answer(ex.orig_answer_text)
        exact += any(normalize_answer(t) == gold for t in texts)
        # when not exact, the annotator chose part of a word that WordPiece does not split ("Japan" in "Japanese")
        contained += all(gold in normalize_answer(t) for t in texts)
    assert contained == answerable
    assert exact / answerable > 0.99
