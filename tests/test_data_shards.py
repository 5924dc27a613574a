"""Vocabulary training, `prepare` shards (round trip, resume, corruption), and the CLI."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from bertkit.data import ShardSet, prepare, read_documents, train_vocab
from bertkit.errors import UserError


def write_corpus(path, n_docs=12, seed=0):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "running", "jumped", "quickly", "zebra", "xylophone", "the"]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n_docs):
            for _ in range(rng.randint(1, 8)):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))) + " .\n")
            f.write("\n")
    return path


@pytest.fixture(scope="module")
def corpus_and_vocab(tmp_path_factory):
    d = tmp_path_factory.mktemp("c")
    corpus = write_corpus(d / "corpus.txt")
    res = train_vocab([corpus], 60, d / "vocab.txt", progress=False, min_frequency=1)
    return corpus, d / "vocab.txt", res


def test_vocab_has_specials_and_size(corpus_and_vocab):
    _, vocab, res = corpus_and_vocab
    words = vocab.read_text(encoding="utf-8").splitlines()
    assert words[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(words) == res["vocab_size"] <= 60 and len(set(words)) == len(words)
    assert any(w.startswith("##") for w in words) and "the" in words


def test_vocab_is_the_same_file_in_every_process_and_ordered_by_use(tmp_path):
    """The trainer walks hash maps seeded per process, so its ids came out in another order on every run (the
    same tokens): three processes must now write the same bytes, specials first, then the tokens the trained
    tokenizer produces most often on the corpus."""
    import subprocess
    import sys
    from collections import Counter

    from bertkit.tokenizer import Tokenizer

    corpus = tmp_path / "c.txt"
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"  # a wide alphabet: many orders to come out in
    corpus.write_text(
        "".join(f"{a}{b}x {b}{a}y {a}q\n" for a in letters for b in letters[:12]), encoding="utf-8"
    )
    code = "import sys; from bertkit.data import train_vocab; train_vocab([sys.argv[1]], 200, sys.argv[2], progress=False, min_frequency=1)"
    outs = []
    for i in range(3):
        out = tmp_path / f"v{i}.txt"
        subprocess.run(
            [sys.executable, "-c", code, str(corpus), str(out)],
            check=True,
            cwd=tmp_path.__class__(__file__).parents[1],
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    words = outs[0].decode().splitlines()
    assert words[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(str(tmp_path / "v0.txt"))
    used = Counter(t for line in corpus.read_text().splitlines() for t in tok.tokenize(line))
    counts = [used[w] for w in words[5:]]
    assert counts == sorted(counts, reverse=True) and counts[0] > 0


def test_vocab_cased(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("Hello World hello world HELLO\n" * 20, encoding="utf-8")
    train_vocab([p], 40, tmp_path / "cased.txt", lowercase=False, progress=False, min_frequency=1)
    train_vocab([p], 40, tmp_path / "uncased.txt", lowercase=True, progress=False, min_frequency=1)
    cased = (tmp_path / "cased.txt").read_text(encoding="utf-8").split()
    uncased = (tmp_path / "uncased.txt").read_text(encoding="utf-8").split()
    assert "H" in cased and "H" not in uncased


def test_prepare_round_trip(corpus_and_vocab, tmp_path):
    from bertkit.tokenizer import Tokenizer

    corpus, vocab, _ = corpus_and_vocab
    other = train_vocab([corpus], 40, tmp_path / "other.txt", progress=False, min_frequency=1)
    prepare([corpus], other["out"], tmp_path / "o", progress=False)  # another vocab first: nothing may leak
    res = prepare([corpus], vocab, tmp_path / "d", shard_size_mb=0.0005, progress=False)
    assert res["num_shards"] > 1 and res["shards_written"] == res["num_shards"]
    tok = Tokenizer(str(vocab))
    docs = read_documents([corpus])
    shards = ShardSet(tmp_path / "d", verify=True)
    assert shards.documents == len(docs) == res["documents"]
    for d, doc in enumerate(docs):
        got = [s.tolist() for s in shards.document(d)]
        assert got == tok.encode_batch_ids(doc, add_special_tokens=False)
    m = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert m["dtype"] == "uint16" and shards.arrays[0]["ids"].dtype == np.uint16
    assert m["tokens"] == sum(s["tokens"] for s in m["shards"]) and len(m["vocab_sha256"]) == 64
    assert (tmp_path / "d" / "vocab.txt").read_bytes() == vocab.read_bytes()


def test_prepare_parallel_matches_serial_and_skips_finished(corpus_and_vocab, tmp_path):
    corpus, vocab, _ = corpus_and_vocab
    a = prepare([corpus], vocab, tmp_path / "a", shard_size_mb=0.0005, progress=False)
    b = prepare([corpus], vocab, tmp_path / "b", shard_size_mb=0.0005, workers=2, progress=False)
    ma = json.loads((tmp_path / "a" / "manifest.json").read_text())
    mb = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert ma["shards"] == mb["shards"] and a["tokens"] == b["tokens"]
    # Interrupted run: one shard's record is gone -> only that shard is rebuilt.
    (tmp_path / "a" / "shard_00001.json").unlink()
    again = prepare([corpus], vocab, tmp_path / "a", shard_size_mb=0.0005, progress=False)
    assert again["shards_written"] == 1 and again["shards_skipped"] == a["num_shards"] - 1
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["shards"] == ma["shards"]
    # A changed option (cased) rebuilds everything.
    cased = prepare([corpus], vocab, tmp_path / "a", shard_size_mb=0.0005, lowercase=False, progress=False)
    assert cased["shards_skipped"] == 0


def _no_decision(*args, **kwargs):  # module level: forked pool workers inherit the patch
    raise AssertionError("a shard-building process decided the tokenizer's fast path")


def test_prepare_takes_no_per_process_tokenizer_decision(corpus_and_vocab, tmp_path, monkeypatch):
    # The decision imports torch for its cache key (~1 s of CPU per process) and measures on a machine
    # without a cached choice: prepare and each of its workers must get the pipeline already chosen.
    from bertkit import tuning
    from bertkit.data.shard_build import load_tokenizer

    corpus, vocab, _ = corpus_and_vocab
    monkeypatch.setattr(tuning, "decide", _no_decision)
    monkeypatch.delenv("BERTKIT_TOKENIZER_FAST_PATH", raising=False)
    a = prepare([corpus], vocab, tmp_path / "a", shard_size_mb=0.0005, progress=False)
    b = prepare([corpus], vocab, tmp_path / "b", shard_size_mb=0.0005, workers=2, progress=False)
    assert a["num_shards"] > 1 and a["tokens"] == b["tokens"]
    assert load_tokenizer(vocab).fast_path is True
    monkeypatch.setenv("BERTKIT_TOKENIZER_FAST_PATH", "0")  # an explicit setting still wins
    assert load_tokenizer(vocab).fast_path is False
    prepare([corpus], vocab, tmp_path / "c", shard_size_mb=0.0005, progress=False)
    ma, mc = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in "ac")
    assert ma["shards"] == mc["shards"]


def _build_shard_noting_the_cache(task):  # module level: the pool pickles it by name
    from pathlib import Path

    from bertkit.data.shard_build import _WORKER, _build_shard

    (Path(task[3]) / f"cache-{task[0]}.txt").write_text(str(len(_WORKER["cache"].index)))
    return _build_shard(task)


def test_pool_workers_start_with_the_first_shards_words_cached(corpus_and_vocab, tmp_path, monkeypatch):
    # Each worker used to tokenize again the words every shard shares; the parent now tokenizes the first
    # shard's distinct words once and the forked workers inherit them (the shards stay the same).
    import os

    from bertkit.data import shards as shards_module

    corpus, vocab, _ = corpus_and_vocab
    monkeypatch.setattr(shards_module, "_build_shard", _build_shard_noting_the_cache)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    a = prepare([corpus], vocab, tmp_path / "a", shard_size_mb=0.0005, workers=2, progress=False)
    assert "TOKENIZERS_PARALLELISM" not in os.environ  # switched off for the warm-up only
    sizes = [int(p.read_text()) for p in (tmp_path / "a").glob("cache-*.txt")]
    assert a["num_shards"] > 2 and len(sizes) == a["num_shards"] and min(sizes) > 0
    monkeypatch.undo()
    prepare([corpus], vocab, tmp_path / "b", shard_size_mb=0.0005, progress=False)
    ma, mb = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in "ab")
    assert ma["shards"] == mb["shards"]


def _failing_build_shard(task):  # module level: the pool pickles it by name
    raise OSError(f"disk full while writing shard {task[0]}")


def test_parallel_prepare_failure_propagates_and_drops_the_tokenizer_hand_over(
    corpus_and_vocab, tmp_path, monkeypatch
):
    from bertkit.data import shards as shards_module

    corpus, vocab, _ = corpus_and_vocab
    monkeypatch.setattr(shards_module, "_build_shard", _failing_build_shard)
    # Repeated: with multiprocessing.Pool, tearing the pool down after a failure hung about one time in
    # ten (and hung CI); each round must raise and return.
    for attempt in range(25):
        with pytest.raises(OSError, match="disk full"):
            prepare(
                [corpus], vocab, tmp_path / f"d{attempt}", shard_size_mb=0.0005, workers=2, progress=False
            )
        assert "inherited" not in shards_module._WORKER and "inherited_cache" not in shards_module._WORKER


def test_corrupted_or_truncated_shard_is_detected(corpus_and_vocab, tmp_path):
    corpus, vocab, _ = corpus_and_vocab
    prepare([corpus], vocab, tmp_path / "d", progress=False)
    ids = tmp_path / "d" / "shard_00000.ids.npy"
    data = ids.read_bytes()
    ids.write_bytes(data[:-7])
    with pytest.raises(UserError, match=r"shard_00000\.ids\.npy: truncated or corrupted"):
        ShardSet(tmp_path / "d")
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    ids.write_bytes(bytes(flipped))
    ShardSet(tmp_path / "d")  # same size: only the checksum can tell
    with pytest.raises(UserError, match=r"shard_00000\.ids\.npy: corrupted shard \(sha256"):
        ShardSet(tmp_path / "d", verify=True)
    res = prepare([corpus], vocab, tmp_path / "d", progress=False)  # re-running repairs it
    assert res["shards_written"] == 1
    ShardSet(tmp_path / "d", verify=True)
    ids.unlink()
    with pytest.raises(UserError, match="shard file missing"):
        ShardSet(tmp_path / "d")
    res = prepare([corpus], vocab, tmp_path / "d", progress=False)
    assert res["shards_written"] == 1
    ShardSet(tmp_path / "d", verify=True)


def test_missing_manifest_and_bad_vocab(tmp_path, corpus_and_vocab):
    corpus, _, _ = corpus_and_vocab
    with pytest.raises(UserError, match="bertkit prepare"):
        ShardSet(tmp_path)
    bad = tmp_path / "v.txt"
    bad.write_text("a\nb\n", encoding="utf-8")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(UserError, match="no text found"):
        prepare([empty], corpus_and_vocab[1], tmp_path / "e", progress=False)
    with pytest.raises(UserError, match=r"lacks \[PAD\]"):
        prepare([corpus], bad, tmp_path / "d", progress=False)


def test_crlf_vocab_reads_as_its_lf_twin(corpus_and_vocab, tmp_path):
    from bertkit.data.shard_build import vocab_tokens
    from bertkit.tokenizer import read_vocab

    lf = corpus_and_vocab[1].read_text(encoding="utf-8")
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(lf.replace("\n", "\r\n").encode("utf-8") + b"\r\n")  # and a blank CRLF line at the end
    want = lf.split("\n")[:-1]
    assert vocab_tokens(crlf) == want
    assert read_vocab(crlf) == [*want, ""]  # the tokenizer keeps all but the file's last empty line
    assert read_vocab(corpus_and_vocab[1]) == want
    lacking = tmp_path / "lacking.txt"
    lacking.write_bytes(lf.replace("[MASK]\n", "").replace("\n", "\r\n").encode("utf-8"))
    with pytest.raises(UserError, match=r"lacks \[MASK\]; use a BERT vocab.txt"):
        vocab_tokens(lacking)


def test_cli_vocab_and_prepare(corpus_and_vocab, tmp_path, capsys):
    from bertkit.cli import main

    corpus, _, _ = corpus_and_vocab
    assert (
        main(
            [
                "vocab",
                "--corpus",
                str(corpus),
                "--vocab-size",
                "50",
                "--out",
                str(tmp_path / "v.txt"),
                "--quiet",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["vocab_size"] <= 50
    args = [
        "prepare",
        "--corpus",
        str(corpus),
        "--vocab",
        str(tmp_path / "v.txt"),
        "--out",
        str(tmp_path / "d"),
    ]
    assert main([*args, "--quiet", "--static", "--dupe-factor", "2", "--max-seq-length", "32"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["documents"] == 12 and out["static"]["instances"] > 0
    z = np.load(tmp_path / "d" / "static_instances.npz")
    assert z["input_ids"].shape == (out["static"]["instances"], 32) and z["masked_lm_ids"].shape[1] == 20
    assert (
        main(
            [
                "prepare",
                "--corpus",
                str(tmp_path / "nope"),
                "--vocab",
                str(tmp_path / "v.txt"),
                "--out",
                str(tmp_path / "e"),
            ]
        )
        == 2
    )
    assert "nope: no such file" in capsys.readouterr().err


TRICKY = [
    "Hello,  world!!  Café naïve résumé",
    "tabs\there\tand\u00a0nbsp and\u3000ideographic space",
    "中文字符 mixed with English.日本語",
    "control\x00chars\x1c\x1fjoined \ufffd replacement",
    "İstanbul ǅ ß ﬁ ligatures and ＦＵＬＬ width",
    " leading and trailing ",
    "",
    "a" * 150 + " averyveryverylongwordthatexceedsnothing",
    "literal [MASK] and x[CLS]y [SEP]. [unk] [UNK]",
    "don't stop-believing (yes) [no] {maybe} <tag> ... — – “quotes” ‘single’",
    "e\u0301 combining \u0301accent at start",
]


@pytest.mark.parametrize("lowercase", [True, False])
def test_cached_encoding_is_exact(lowercase, shared_data):
    from bertkit.data.shard_build import ChunkCache, encode_sentences
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer(str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"), lowercase=lowercase)
    wiki = (
        (shared_data / "corpus" / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()[:400]
    )
    sentences = TRICKY + [s.strip() for s in wiki]
    cache = ChunkCache()
    for _ in range(2):  # cold and warm cache
        flat, lengths = encode_sentences(tok, sentences, "int32", cache)
        want = tok.encode_batch_ids(sentences, add_special_tokens=False)
        assert lengths.tolist() == [len(w) for w in want]
        assert flat.tolist() == [i for w in want for i in w]


@pytest.mark.parametrize("lowercase", [True, False])
def test_vocabulary_words_skip_the_tokenizer_with_the_same_ids(lowercase):
    from bertkit.data.shard_build import encode_chunks
    from bertkit.tokenizer import Tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "hello", "##s", "longword", "Cat"]
    vocab += ["x", "##yz", ",", "1999", "The", "cafe"]
    tok = Tokenizer.from_vocab(vocab, lowercase=lowercase, max_input_chars_per_word=6)
    chunks = ["The", "cat", "CATS", "hello,", "longword", "1999", "", "xyz", "café", "Cat", "[MASK]", "x_y"]
    encoded: list[str] = []
    real = tok.encode_batch
    tok.encode_batch = lambda texts, **kw: encoded.extend(texts) or real(texts, **kw)
    flat, lengths = encode_chunks(tok, chunks)
    want = Tokenizer.from_vocab(vocab, lowercase=lowercase, max_input_chars_per_word=6).encode_batch_ids(
        chunks
    )
    assert lengths.tolist() == [len(w) for w in want]
    assert flat.tolist() == [i for w in want for i in w]
    # one whole vocabulary word of ASCII letters and digits, within the word length: its id, no tokenizing
    assert " ".join(encoded).split(" ") == [c for c in chunks if c not in {"The", "cat", "1999", "Cat"}]


def test_chunk_cache_past_its_limit_and_after_a_failure(shared_data):
    from bertkit.data.shard_build import ChunkCache, encode_sentences
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer(str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"))
    first = ["the cat sat on the mat .", "a cat ; the dog"]  # 9 distinct chunks
    second = ["dogs and cats , birds", "the end"]  # 7, 6 of them new (9 + 6 > limit 10)
    huge = [" ".join(f"w{i}" for i in range(25))]  # more distinct chunks than the limit alone
    cache = ChunkCache(limit=10)
    for sentences, cached in ((first, 9), (first, 9), (second, 7), (huge, 25), (first, 9)):
        flat, lengths = encode_sentences(tok, sentences, "int32", cache)
        want = tok.encode_batch_ids(sentences)
        assert lengths.tolist() == [len(w) for w in want]
        assert flat.tolist() == [i for w in want for i in w]
        assert len(cache.index) == cached and len(cache.off) == cached + 1

    class Failing:
        def encode_batch(self, *a, **k):
            raise RuntimeError("tokenizer failed")

    with pytest.raises(RuntimeError, match="tokenizer failed"):
        encode_sentences(Failing(), ["new words here"], "int32", cache)
    assert len(cache.index) == 0  # no chunk is left numbered without its tokens
    flat, _ = encode_sentences(tok, ["new words here"], "int32", cache)
    assert flat.tolist() == tok.encode_batch_ids(["new words here"])[0]


def test_cli_prepare_does_not_import_torch(corpus_and_vocab, tmp_path):
    # torch costs ~1.3 CPU-s to import, several times the work of preparing a small corpus; only the
    # parser's choices (objectives, int8 engines) had pulled it in.
    import subprocess
    import sys

    corpus, vocab, _ = corpus_and_vocab
    code = (
        "import sys\n"
        "from bertkit.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "print('exit', rc, 'torch' in sys.modules, 'bertkit.objectives' in sys.modules, file=sys.stderr)\n"
    )
    args = [
        "prepare",
        "--corpus",
        str(corpus),
        "--vocab",
        str(vocab),
        "--out",
        str(tmp_path / "d"),
        "--quiet",
    ]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "exit 0 False False", out.stderr
    assert json.loads(out.stdout)["num_shards"] == 1


def test_prepare_jsonl_with_skipped_lines(corpus_and_vocab, tmp_path):
    _, vocab, _ = corpus_and_vocab
    p = tmp_path / "c.jsonl"
    rows = [{"text": "Alpha beta gamma. Delta running!"}, {"text": "The zebra jumped quickly."}]
    p.write_text(json.dumps(rows[0]) + "\n{broken\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"c\.jsonl:2"):
        prepare([p], vocab, tmp_path / "d", progress=False)
    res = prepare((x for x in [p]), vocab, tmp_path / "d", on_error="skip", progress=False)
    assert res["skipped_lines"] == 1 and res["documents"] == 2 and res["sentences"] == 3
    assert res["corpus"] == [str(p)]


def test_shard_arrays_skip_fsync_but_stay_atomic(tmp_path, monkeypatch):
    """Shard arrays are written without fsync (their checksums live in the record), yet a failed write
    still leaves neither a partial file nor a temp file behind."""
    import os

    import numpy as np

    from bertkit.data import shard_build

    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    info = shard_build._write_array(tmp_path / "a.npy", np.arange(5))
    assert synced == [] and np.load(tmp_path / "a.npy").tolist() == [0, 1, 2, 3, 4]
    assert info["bytes"] == (tmp_path / "a.npy").stat().st_size

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        shard_build._write_array(tmp_path / "b.npy", np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


def test_prepare_fsyncs_a_fixed_number_of_times_and_resumes_after_a_lost_record(
    corpus_and_vocab, tmp_path, monkeypatch
):
    """Only the vocabulary copy and the manifest (file and directory each) are fsynced, however many shards;
    a record lost or torn in a power failure makes its shard be rebuilt, identical."""
    import os

    corpus, vocab, _ = corpus_and_vocab
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    out = tmp_path / "d"
    m = prepare([corpus], vocab, out, shard_size_mb=0.0002, progress=False)
    assert m["num_shards"] >= 3 and len(synced) == 4
    arrays = {p.name: p.read_bytes() for p in out.glob("shard_*.npy")}
    (out / "shard_00001.json").write_bytes(b"")  # torn by a crash
    (out / "shard_00002.json").write_text('{"name": "shard_00002", "text_sha', encoding="utf-8")
    again = prepare([corpus], vocab, out, shard_size_mb=0.0002, progress=False)
    assert again["shards_written"] == 2 and again["shards_skipped"] == m["num_shards"] - 2
    assert {p.name: p.read_bytes() for p in out.glob("shard_*.npy")} == arrays


def test_vocab_keeps_the_trainers_alphabet_limit(tmp_path):
    """Only characters of the trainer's alphabet (the ``limit_alphabet`` most frequent) get a "##c" piece: a
    corpus with many rare characters inside words does not spend the vocabulary on them."""
    rare = [chr(0x0430 + i) for i in range(30)]  # 30 Cyrillic letters inside words, each once
    common = "the cat sat on the mat " * 50
    corpus = tmp_path / "c.txt"
    corpus.write_text(common + " ".join(f"x{c}x" for c in rare) + "\n", encoding="utf-8")
    train_vocab([corpus], 200, tmp_path / "v.txt", progress=False, min_frequency=1, limit_alphabet=12)
    words = (tmp_path / "v.txt").read_text(encoding="utf-8").splitlines()
    pieces = [w for w in words if w.startswith("##") and len(w) == 3]
    assert len(pieces) <= 12 and "##a" in pieces  # within the alphabet's 12 characters, the common ones in


def _compress(plain, suffix):
    import bz2
    import gzip
    import lzma

    opener = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}[suffix]
    out = plain.with_name(plain.name + suffix)
    with opener(out, "wb") as f:
        f.write(plain.read_bytes())
    return out


def test_compressed_corpus_gives_the_same_vocab_and_shards(tmp_path):
    plain = write_corpus(tmp_path / "corpus.txt", n_docs=40, seed=3)
    inputs = {"plain": plain, **{s: _compress(plain, s) for s in (".gz", ".xz", ".bz2")}}
    outs = {}
    for name, path in inputs.items():
        vocab = tmp_path / f"vocab{name}.txt"
        train_vocab([path], 60, vocab, progress=False, min_frequency=1)
        data = tmp_path / f"data{name}"
        prepare([path], vocab, data, shard_size_mb=0.001, workers=2 if name == ".xz" else 1, progress=False)
        manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
        assert manifest.pop("corpus") == [str(path)]  # the one field that names the input
        files = {p.name: p.read_bytes() for p in sorted(data.iterdir()) if p.name != "manifest.json"}
        outs[name] = (vocab.read_bytes(), files, manifest)
    assert len(outs["plain"][1]) > 8  # several shards
    for name in (".gz", ".xz", ".bz2"):
        assert outs[name] == outs["plain"], name


def _frames(stderr: str, desc: str) -> list[str]:
    return [f for f in stderr.replace("\r", "\n").splitlines() if f.startswith(desc)]


def test_progress_counts_compressed_bytes_to_the_end(tmp_path, capsys):
    plain = write_corpus(tmp_path / "corpus.txt", n_docs=200, seed=4)
    xz = _compress(plain, ".xz")
    train_vocab([xz], 60, tmp_path / "v.txt", min_frequency=1)
    err = capsys.readouterr().err
    for stage in ("vocab 1/3 alphabet", "vocab 2/3", "vocab 3/3 counting"):
        assert _frames(err, stage), stage
    # one bar over the three passes, ending at three times the stored size
    assert "100%|" in _frames(err, "vocab 3/3 counting")[-1]
    prepare([xz], tmp_path / "v.txt", tmp_path / "d", shard_size_mb=0.001)
    frames = _frames(capsys.readouterr().err, "prepare:")
    # counted in text bytes, the bar would run past the compressed total and lose its percentage
    assert frames and all("%|" in f for f in frames) and "100%|" in frames[-1]


def test_cli_lists_a_directorys_files_unless_quiet(tmp_path, capsys):
    from bertkit.cli import main

    d = tmp_path / "corpus"
    (d / "more").mkdir(parents=True)
    plain = write_corpus(d / "a.txt", seed=5)
    _compress(plain, ".gz").rename(d / "more" / "b.txt.gz")
    args = ["vocab", "--corpus", str(d), "--vocab-size", "50", "--min-frequency", "1"]
    assert main([*args, "--out", str(tmp_path / "v.txt")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(f"corpus: 2 files under {d} (")
    assert err.splitlines()[0].endswith(": a.txt, more/b.txt.gz")
    assert main([*args, "--out", str(tmp_path / "w.txt"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    prep = ["prepare", "--corpus", str(d), "--vocab", str(tmp_path / "v.txt"), "--out", str(tmp_path / "d")]
    assert main(prep) == 0
    assert capsys.readouterr().err.startswith(f"corpus: 2 files under {d} (")


def test_prepare_paragraphs_format_keeps_the_tokens_in_more_sentences(tmp_path):
    from bertkit.cli import main

    corpus = tmp_path / "c.txt"
    rng = random.Random(6)
    words = ["alpha", "beta", "gamma", "delta", "running", "jumped", "quickly", "zebra"]
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(10):  # a document: paragraphs of several sentences, one paragraph per line
            for _ in range(rng.randint(1, 4)):
                sents = [" ".join(rng.choice(words) for _ in range(5)).capitalize() + "." for _ in range(3)]
                f.write(" ".join(sents) + "\n")
            f.write("\n")
    vocab = tmp_path / "v.txt"
    train_vocab([corpus], 40, vocab, progress=False, min_frequency=1)
    res = {}
    for fmt in ("lines", "paragraphs"):
        args = ["--corpus", str(corpus), "--vocab", str(vocab), "--out", str(tmp_path / fmt), "--quiet"]
        assert main(["prepare", *args, "--format", fmt]) == 0
        res[fmt] = json.loads((tmp_path / fmt / "manifest.json").read_text(encoding="utf-8"))
    assert res["paragraphs"]["documents"] == res["lines"]["documents"] == 10
    assert res["paragraphs"]["sentences"] == 3 * res["lines"]["sentences"]
    assert res["paragraphs"]["tokens"] == res["lines"]["tokens"]


def test_prepare_clamps_workers_to_cpus_and_shards(corpus_and_vocab, tmp_path, monkeypatch, caplog):
    """``--workers 100000`` once forked 4,265 processes: the pool gets at most the usable CPUs and the
    shards, and the log says so."""
    from concurrent.futures import ProcessPoolExecutor

    from bertkit import workers
    from bertkit.data import shards as shards_module

    corpus, vocab, _ = corpus_and_vocab
    sizes = []

    def recording_pool(n, **kw):
        sizes.append(n)
        return ProcessPoolExecutor(min(n, 4), **kw)  # never thousands, even where the clamp is missing

    monkeypatch.setattr(shards_module, "ProcessPoolExecutor", recording_pool)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    caplog.set_level("WARNING", logger="bertkit")
    serial = prepare([corpus], vocab, tmp_path / "s", shard_size_mb=0.0005, progress=False)
    many = prepare([corpus], vocab, tmp_path / "m", shard_size_mb=0.0005, workers=100_000, progress=False)
    assert sizes == [2] and many["tokens"] == serial["tokens"] and serial["num_shards"] > 2
    assert any("--workers 100000: using 2 worker processes" in r.getMessage() for r in caplog.records)
    size = corpus.stat().st_size  # one shard's worth of text: one task, so no pool at all
    one = prepare([corpus], vocab, tmp_path / "o", shard_size_mb=size / 2**20, workers=8, progress=False)
    assert sizes == [2] and one["num_shards"] == 1


_ORPHAN = r"""
import os, sys, time
from bertkit import workers
from bertkit.data import shards

def slow(task):  # a worker that would run for ten minutes
    os.write(1, f"{os.getpid()}\n".encode())  # one write: the two workers' lines cannot interleave
    time.sleep(600)

workers.usable_cpus = lambda: 2  # two workers even on a one-CPU machine
shards._build_shard = slow
shards.prepare([sys.argv[1]], sys.argv[2], sys.argv[3], shard_size_mb=0.0005, workers=2, progress=False)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_prepare_workers_die_with_their_parent(corpus_and_vocab, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from children import child_env

    corpus, vocab, _ = corpus_and_vocab
    argv = [sys.executable, "-c", _ORPHAN, str(corpus), str(vocab), str(tmp_path / "d")]
    parent = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        pids = [int(parent.stdout.readline()) for _ in range(2)]  # both workers are busy
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(_alive, pids)), "a worker outlived its killed parent"
    finally:
        parent.kill()
        for pid in filter(_alive, pids):  # only on failure: the orphans this test started
            os.kill(pid, signal.SIGKILL)
