"""``bertkit vocab --kind bpe``: a byte-level BPE tokenizer.json laid out as ModernBERT's, trained the same in
every process; ``bertkit prepare`` shards with it; ``bertkit pretrain`` builds a ModernBERT on those shards whose
folder transformers loads, tokenizer included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bpe_folder import generated_texts

from bertkit.cli import main
from bertkit.data import ShardSet, prepare
from bertkit.data.vocab_bpe import train_bpe
from bertkit.errors import UserError
from bertkit.tokenizer import Tokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _corpus(path: Path, docs: int = 40, seed: int = 3) -> Path:
    """Documents of one-line sentences (the generated words: accents, CJK, emoji, punctuation), blank line
    between documents."""
    texts = [" ".join(t.split()) for t in generated_texts(docs * 6, seed=seed)]
    lines = []
    for d in range(docs):
        lines += [t for t in texts[d * 6 : (d + 1) * 6] if t] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus_and_bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    corpus = _corpus(d / "corpus.txt")
    res = train_bpe([corpus], 400, d / "tokenizer.json", progress=False, min_frequency=1)
    return corpus, d / "tokenizer.json", res


def test_the_file_is_modernberts_layout(corpus_and_bpe):
    _, path, res = corpus_and_bpe
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["model"]["type"] == "BPE" and res["vocab_size"] == 400 and res["kind"] == "bpe"
    assert [(a["id"], a["content"]) for a in data["added_tokens"]] == list(enumerate(SPECIALS))
    assert [a["content"] for a in data["added_tokens"] if a["lstrip"]] == ["[MASK]"]
    assert data["pre_tokenizer"] == {
        "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True,
    }  # fmt: skip
    assert data["decoder"]["type"] == "ByteLevel"
    tok = Tokenizer.from_pretrained(path.parent)
    assert Tokenizer.from_pretrained(path).encode_batch_ids(["a café"]) == tok.encode_batch_ids(["a café"])
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (
        0, 1, 2, 3, 4,
    )  # fmt: skip
    assert tok("river café")["input_ids"][0][[0, -1]].tolist() == [2, 3]
    pair = tok(["the river"], ["a café"])
    assert pair["input_ids"][0].tolist().count(3) == 2 and pair["token_type_ids"][0][-1] == 1
    # [MASK] takes the space before it: "a [MASK]" is "a" and the mask, no space token between
    river, masked = tok.encode_batch_ids(["river", "river [MASK]"])
    assert masked == [*river, 4]
    assert tok.decode(tok.encode_batch_ids(["Naïve  café 東京 😀"])[0]) == "naïve  café 東京 😀"


def test_the_same_corpus_gives_the_same_bytes_in_every_process(tmp_path):
    """The Rust trainer's hash maps are seeded per process: three processes must write one file."""
    corpus = tmp_path / "c.txt"
    letters = "abcdefghijklmnopqrstuvwxyz0123456789éü"  # a wide alphabet: many ties between merges
    corpus.write_text(
        "".join(f"{a}{b}x {b}{a}y {a}q\n" for a in letters for b in letters[:12]), encoding="utf-8"
    )
    code = (
        "import sys; from bertkit.data.vocab_bpe import train_bpe; "
        "train_bpe([sys.argv[1]], 400, sys.argv[2], progress=False, min_frequency=1)"
    )
    outs = []
    for i in range(3):
        out = tmp_path / f"t{i}.json"
        root = Path(__file__).parents[1]
        subprocess.run([sys.executable, "-c", code, str(corpus), str(out)], check=True, cwd=root)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_cased_keeps_case_and_uncased_lowers_it(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The River Runs\nthe river runs\nTHE RIVER\n" * 5, encoding="utf-8")
    cased = train_bpe([corpus], 300, tmp_path / "cased.json", lowercase=False, progress=False)
    uncased = train_bpe([corpus], 300, tmp_path / "uncased.json", progress=False)
    assert (cased["lowercase"], uncased["lowercase"]) == (False, True)
    from bertkit.tokenizer import BPETokenizer

    c = BPETokenizer.from_file(tmp_path / "cased.json")
    u = BPETokenizer.from_file(tmp_path / "uncased.json")
    assert c.tokenize("River") != c.tokenize("river")
    assert u.tokenize("River") == u.tokenize("river")


def test_cli_writes_it_and_refuses_an_existing_output_and_a_tiny_size(corpus_and_bpe, tmp_path, capsys):
    corpus, trained, _ = corpus_and_bpe
    args = ["vocab", "--kind", "bpe", "--corpus", str(corpus), "--min-frequency", "1", "--quiet"]
    out = tmp_path / "tokenizer.json"
    assert main([*args, "--vocab-size", "400", "--out", str(out)]) == 0
    assert out.read_bytes() == trained.read_bytes()
    capsys.readouterr()
    assert main([*args, "--vocab-size", "400", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*args, "--vocab-size", "100", "--out", str(tmp_path / "small.json")]) == 2
    err = capsys.readouterr().err
    assert "at least 262" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "small.json").exists()


def test_prepare_shards_each_sentence_as_the_tokenizer_encodes_it(corpus_and_bpe, tmp_path):
    corpus, path, _ = corpus_and_bpe
    res = prepare([corpus], path, tmp_path / "d", shard_size_mb=0.002, progress=False)
    assert res["num_shards"] > 1 and res["tokenizer"] == "bpe" and res["vocab_file"] == "tokenizer.json"
    assert (tmp_path / "d" / "tokenizer.json").read_bytes() == path.read_bytes()
    shards = ShardSet(tmp_path / "d", verify=True)
    assert shards.vocab_words()[:5] == SPECIALS and shards.vocab_size == 400
    tok = Tokenizer.from_pretrained(path.parent)
    docs = corpus.read_text(encoding="utf-8").strip().split("\n\n")
    assert shards.documents == len(docs)
    for d, doc in enumerate(docs):
        first, *rest = doc.split("\n")
        # a sentence after another starts with the spaced form of its word, as in running text
        want = tok.encode_batch_ids([first, *(" " + s for s in rest)])
        assert [s.tolist() for s in shards.document(d)] == want
        assert sum(want, []) == tok.encode_batch_ids([" ".join([first, *rest])])[0]
    ids = np.concatenate([a["ids"] for a in shards.arrays])
    assert ids.max() < shards.vocab_size and not np.isin(ids, [0, 2, 3, 4]).any()
    # a folder holding the tokenizer.json is the same vocabulary; finished shards are kept
    again = prepare([corpus], path.parent, tmp_path / "d", shard_size_mb=0.002, progress=False)
    assert again["shards_skipped"] == res["num_shards"]
    two = prepare([corpus], path, tmp_path / "w2", shard_size_mb=0.002, workers=2, progress=False)
    for name in ("ids", "sents", "docs"):
        a = [np.load(p) for p in sorted((tmp_path / "d").glob(f"*.{name}.npy"))]
        b = [np.load(p) for p in sorted((tmp_path / "w2").glob(f"*.{name}.npy"))]
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert two["tokens"] == res["tokens"]


def test_static_is_refused_for_bpe_in_one_line(corpus_and_bpe, tmp_path, capsys):
    corpus, path, _ = corpus_and_bpe
    args = ["prepare", "--corpus", str(corpus), "--vocab", str(path), "--out", str(tmp_path / "d")]
    assert main([*args, "--static", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--static" in err and "BPE" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d").exists()


def _without(path: Path, out: Path, token: str) -> Path:
    """``path``'s tokenizer.json with ``token`` renamed out of its added tokens and vocabulary."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for a in data["added_tokens"]:
        if a["content"] == token:
            a["content"] = "<other>"
    vocab = data["model"]["vocab"]
    vocab["<other>"] = vocab.pop(token)
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


@pytest.mark.parametrize("token", ["[MASK]", "[PAD]"])
def test_a_tokenizer_json_without_a_special_token_is_refused(corpus_and_bpe, tmp_path, token):
    corpus, path, _ = corpus_and_bpe
    bad = _without(path, tmp_path / "bad.json", token)
    with pytest.raises(UserError, match=rf"bad.json: vocabulary lacks \{token[:-1]}\]; train one"):
        prepare([corpus], bad, tmp_path / "d", progress=False)


def test_a_wordpiece_tokenizer_json_is_refused(corpus_and_bpe, tmp_path):
    corpus, _, _ = corpus_and_bpe
    from bertkit.data import train_vocab

    train_vocab([corpus], 60, tmp_path / "vocab.txt", progress=False, min_frequency=1)
    Tokenizer(str(tmp_path / "vocab.txt")).save_pretrained(tmp_path / "wp")
    with pytest.raises(UserError, match="'WordPiece', not a BPE tokenizer.json; give .* vocab.txt"):
        prepare([corpus], tmp_path / "wp" / "tokenizer.json", tmp_path / "d", progress=False)
    # the folder means its vocab.txt
    assert prepare([corpus], tmp_path / "wp", tmp_path / "d", progress=False)["tokenizer"] == "wordpiece"


def test_a_local_cluster_shards_bpe_as_one_process(corpus_and_bpe, tmp_path):
    """Cluster workers load the tokenizer.json the coordinator copies into --out."""
    pytest.importorskip("distributed")
    corpus, path, _ = corpus_and_bpe
    one = prepare([corpus], path, tmp_path / "one", shard_size_mb=0.004, progress=False)
    dask = prepare([corpus], path, tmp_path / "dask", shard_size_mb=0.004, progress=False, cluster="local:2")
    assert dask["shards_written"] == one["num_shards"] > 1
    files = [
        {p.name: p.read_bytes() for p in sorted(d.iterdir())} for d in (tmp_path / "one", tmp_path / "dask")
    ]
    assert files[0] == files[1] and "tokenizer.json" in files[0]
