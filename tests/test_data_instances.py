"""Static instances: a hand-checked example, parity with the original release (golden fingerprints),
determinism, and the masking statistics."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random

import numpy as np
import pytest

from bertkit.data import create_training_instances, instances_sha256, load_static_instances
from bertkit.data.corpus import read_documents
from bertkit.data.instances import create_masked_lm_predictions, instances_to_arrays, truncate_seq_pair

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class ScriptedRng:
    """An rng whose every draw is scripted, so the expected instances can be derived by hand."""

    def __init__(self, randoms, randints):
        self.randoms, self.randints, self.shuffles = list(randoms), list(randints), 0

    def random(self):
        return self.randoms.pop(0)

    def randint(self, a, b):
        v = self.randints.pop(0)
        assert a <= v <= b, (a, b, v)
        return v

    def shuffle(self, x):
        self.shuffles += 1  # identity


def test_hand_checked_example():
    docs = [[["the", "cat"], ["sat", "down"], ["on", "the", "mat"]], [["dogs", "bark"]]]
    vocab = [*SPECIALS, "the", "cat", "sat", "down", "on", "mat", "dogs", "bark"]
    # doc 0: short-seq coin 0.5 (>= 0: full target 6); chunk = 3 sentences (7 tokens >= 6); a_end = 1;
    #   next coin 0.9 -> actual next; B = sat down on the mat (5) -> 7 > 6: trim B (longer), coin 0.1 -> front;
    #   [CLS] the cat [SEP] down on the mat [SEP]: 9 tokens, round(9 * 0.25) = 2 predictions, candidates in
    #   order (identity shuffle): pos 1 coin 0.3 -> [MASK]; pos 2 coins 0.85, 0.2 -> kept.
    # doc 1: short-seq coin 0.5; one-sentence chunk -> random next without a coin; random doc 1 (itself,
    #   retried) then 0; start sentence 2 -> B = on the mat; [CLS] dogs bark [SEP] on the mat [SEP]: 8 tokens,
    #   2 predictions: pos 1 coins 0.95, 0.7 -> random word vocab[3] = [SEP]; pos 2 coin 0.1 -> [MASK].
    rng = ScriptedRng(
        randoms=[0.5, 0.9, 0.1, 0.3, 0.85, 0.2, 0.5, 0.95, 0.7, 0.1],
        randints=[1, 1, 0, 2, 3],
    )
    out = create_training_instances(docs, vocab, 9, 1, 0.0, 0.25, 20, rng)
    assert not rng.randoms and not rng.randints and rng.shuffles == 4  # docs, 2x candidates, instances
    a, b = out
    assert a.tokens == ["[CLS]", "[MASK]", "cat", "[SEP]", "down", "on", "the", "mat", "[SEP]"]
    assert a.segment_ids == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert (a.is_random_next, a.masked_lm_positions, a.masked_lm_labels) == (False, [1, 2], ["the", "cat"])
    assert b.tokens == ["[CLS]", "[SEP]", "[MASK]", "[SEP]", "on", "the", "mat", "[SEP]"]
    assert b.segment_ids == [0, 0, 0, 0, 1, 1, 1, 1]
    assert (b.is_random_next, b.masked_lm_positions, b.masked_lm_labels) == (True, [1, 2], ["dogs", "bark"])


# Fingerprints of google-research/bert create_pretraining_data.py (create_training_instances with its own
# FullTokenizer on the uncased vocab, random.Random(seed)), computed once with the original script; see
# benchmarks/bench_data.py for how to fetch it and re-run it side by side.
GOLDEN = [
    # (corpus, seed, max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob, max_predictions, wwm, n, sha)
    (
        "sample",
        12345,
        128,
        10,
        0.1,
        0.15,
        20,
        False,
        118,
        "c8bcd4f8e00359f4efcd2a9bd03107d7aab4899a9e9b0f615a561e3a6b836c11",
    ),
    (
        "sample",
        7,
        64,
        3,
        0.3,
        0.2,
        12,
        True,
        59,
        "b27c93635d4bf5918508a6985f068c69fa357427ce464bf869a64f53e9fadda2",
    ),
    (
        "gutenberg",
        42,
        128,
        2,
        0.1,
        0.15,
        20,
        True,
        598,
        "6761424a780318c7e2ae0ae9b0cd748858353eb722ff4e55f77b8fadc817ce7f",
    ),
    (
        "gutenberg",
        3,
        96,
        1,
        0.1,
        0.15,
        14,
        False,
        375,
        "65fbfbedafca33be7341b84211eb665a4321515d9bd169d8fbcc019f63c600f9",
    ),
]
DOCS_SHA = {
    "sample": "001175d9b96208bd13e99de497a773efa8a2dd6785dc98155ca51fd44ecddf43",
    "gutenberg": "2987c89f2c018b34ac0c01aa34606708843ff99e3a302de0b77948b3c10be811",
}
GUTENBERG_SLICE = [
    "blake-poems",
    "carroll-alice",
    "shakespeare-caesar",
    "austen-emma",
]  # first 300 lines each


def golden_corpus(name, shared_data, tmp_path):
    if name == "sample":
        return shared_data / "corpus" / "sample_text.txt"
    path = tmp_path / "gutenberg_slice.txt"
    with open(path, "w", encoding="utf-8") as f:
        for book in GUTENBERG_SLICE:
            with open(shared_data / "corpus" / "gutenberg" / f"{book}.txt", encoding="utf-8") as g:
                f.writelines(itertools.islice(g, 300))
            f.write("\n")
    return path


@pytest.fixture(scope="module")
def uncased(shared_data):
    from bertkit.tokenizer import Tokenizer

    return Tokenizer(str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"), lowercase=True)


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c[0]}-seed{c[1]}-wwm{c[7]}")
def test_parity_with_original_release(case, shared_data, uncased, tmp_path):
    name, seed, msl, dupe, short, mlm, maxpred, wwm, n, sha = case
    corpus = golden_corpus(name, shared_data, tmp_path)
    docs = [[t for s in doc if (t := uncased.tokenize(s))] for doc in read_documents([corpus], "lines")]
    assert hashlib.sha256(json.dumps(docs).encode()).hexdigest() == DOCS_SHA[name], "tokenization differs"
    instances = create_training_instances(
        docs, uncased.ids_to_tokens, msl, dupe, short, mlm, maxpred, random.Random(seed), whole_word_mask=wwm
    )
    assert len(instances) == n
    assert instances_sha256(instances) == sha


@pytest.mark.parametrize("case", [GOLDEN[0], GOLDEN[1]], ids=["seed12345", "seed7-wwm"])
def test_static_from_shards_is_the_same_stream(case, shared_data, uncased, tmp_path):
    from bertkit.data import create_static_from_shards, prepare

    _, seed, msl, dupe, short, mlm, maxpred, wwm, n, sha = case
    corpus = shared_data / "corpus" / "sample_text.txt"
    prepare([corpus], shared_data / "vocab" / "bert-base-uncased-vocab.txt", tmp_path / "d", progress=False)
    res = create_static_from_shards(
        tmp_path / "d", tmp_path / "s.npz", msl, dupe, short, mlm, maxpred, seed, wwm
    )
    docs = [[uncased.tokenize(s) for s in doc] for doc in read_documents([corpus])]
    ref = create_training_instances(
        docs, uncased.ids_to_tokens, msl, dupe, short, mlm, maxpred, random.Random(seed), wwm
    )
    assert instances_sha256(ref) == sha and res["instances"] == len(ref) == n
    want = instances_to_arrays(ref, msl, maxpred, uncased.vocab)
    got = load_static_instances(tmp_path / "s.npz")
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def make_docs(rng, n_docs=30, vocab=None):
    vocab = vocab or [f"w{i}" for i in range(300)]
    return [
        [[rng.choice(vocab) for _ in range(rng.randint(3, 25))] for _ in range(rng.randint(1, 12))]
        for _ in range(n_docs)
    ]


def test_deterministic_and_seed_dependent():
    docs = make_docs(random.Random(0))
    vocab = SPECIALS + [f"w{i}" for i in range(300)]

    def run(seed):
        rng = random.Random(seed)
        return instances_sha256(create_training_instances(docs, vocab, 64, 2, 0.1, 0.15, 10, rng))

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_invariants_on_many_instances():
    docs = make_docs(random.Random(1), n_docs=60)
    doc_of = {}
    for d, doc in enumerate(docs):  # tag each token with its document
        for s in doc:
            for j, t in enumerate(s):
                s[j] = f"{t}_{d}"
                doc_of[s[j]] = d
    vocab = SPECIALS + sorted(doc_of)
    insts = create_training_instances(docs, vocab, 48, 3, 0.1, 0.15, 7, random.Random(5))
    random_next = 0
    for inst in insts:
        assert len(inst.tokens) <= 48
        toks = list(inst.tokens)
        for p, lab in zip(inst.masked_lm_positions, inst.masked_lm_labels):
            toks[p] = lab
        assert toks[0] == "[CLS]" and toks[-1] == "[SEP]" and toks.count("[SEP]") == 2
        sep = toks.index("[SEP]")
        docs_a = {doc_of[t] for t in toks[1:sep]}
        docs_b = {doc_of[t] for t in toks[sep + 1 : -1]}
        assert len(docs_a) == 1 and len(docs_b) == 1
        assert (docs_a != docs_b) == inst.is_random_next
        random_next += inst.is_random_next
        assert not {"[CLS]", "[SEP]"} & set(inst.masked_lm_labels)
        assert inst.segment_ids == [0] * (sep + 1) + [1] * (len(toks) - sep - 1)
    assert random_next > 0.4 * len(insts)


def binomial_ok(k, n, p, z=4.5):
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


def test_masking_statistics():
    rng = random.Random(0)
    vocab = SPECIALS + [f"w{i}" for i in range(1000)]
    masked = kept = randomised = total_pred = 0
    for _ in range(3000):
        n = rng.randint(10, 60)
        toks = ["[CLS]"] + [f"w{rng.randrange(1000)}" for _ in range(n)] + ["[SEP]"]
        out, pos, labels = create_masked_lm_predictions(toks, 0.15, 20, vocab, rng)
        assert len(pos) == min(20, max(1, int(round(len(toks) * 0.15))))
        assert pos == sorted(pos) and 0 not in pos and len(toks) - 1 not in pos
        for p, lab in zip(pos, labels):
            assert toks[p] == lab
            masked += out[p] == "[MASK]"
            kept += out[p] == lab
            randomised += out[p] not in ("[MASK]", lab)
        total_pred += len(pos)
    assert binomial_ok(masked, total_pred, 0.8)
    assert binomial_ok(kept, total_pred, 0.1 + 0.1 / len(vocab))
    assert binomial_ok(randomised, total_pred, 0.1 - 0.1 / len(vocab))


def test_whole_word_masking_takes_whole_words():
    rng = random.Random(3)
    vocab = SPECIALS + ["a", "b", "c", "##x", "##y"]
    for _ in range(500):
        body = [rng.choice(["a", "b", "c", "##x", "##y"]) for _ in range(30)]
        body[0] = "a"
        toks = ["[CLS]", *body, "[SEP]"]
        _, pos, _ = create_masked_lm_predictions(toks, 0.2, 8, vocab, rng, whole_word_mask=True)
        chosen = set(pos)
        assert len(pos) <= 8
        for p in pos:  # the word a chosen piece belongs to is chosen entirely
            s = p
            while toks[s].startswith("##"):
                s -= 1
            e = p + 1
            while toks[e].startswith("##"):
                e += 1
            assert set(range(s, e)) <= chosen


def test_truncate_seq_pair_trims_longer_side():
    rng = random.Random(0)
    a, b = list(range(10)), list(range(100, 103))
    truncate_seq_pair(a, b, 8, rng)
    assert len(a) == 5 and b == [100, 101, 102]
    assert a == list(range(a[0], a[0] + 5))  # a contiguous window of the original
