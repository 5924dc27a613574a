"""Corpus readers: the four formats, the sentence splitter, and errors that name file and line."""

from __future__ import annotations

import json

import pytest

from bertkit.data.corpus import CorpusStats, iter_documents, read_documents, split_sentences
from bertkit.errors import UserError


def test_lines_format_blank_line_between_documents(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("First one.\nSecond one.\n\n\n  \nOther doc.\n\n", encoding="utf-8")
    q = tmp_path / "d.txt"
    q.write_text("Third file no trailing newline.", encoding="utf-8")
    stats = CorpusStats()
    docs = list(iter_documents([p, q], stats=stats))
    assert docs == [["First one.", "Second one."], ["Other doc."], ["Third file no trailing newline."]]
    assert (stats.files, stats.documents, stats.sentences) == (2, 3, 4)


def test_directory_file_and_prose_formats(tmp_path):
    d = tmp_path / "books"
    d.mkdir()
    (d / "a.txt").write_text("Line one.\n\nLine two.\n", encoding="utf-8")
    (d / "b.txt").write_text("Only line.\n", encoding="utf-8")
    (d / ".hidden").write_text("skip me\n", encoding="utf-8")
    (d / "empty.txt").write_text("\n\n", encoding="utf-8")
    assert read_documents([d], "file") == [["Line one.", "Line two."], ["Only line."]]
    prose = tmp_path / "p.txt"
    prose.write_text("Dr. Watson arrived. He was\nlate!\n\nA new paragraph? Yes.\n", encoding="utf-8")
    assert read_documents([prose], "prose") == [
        ["Dr. Watson arrived.", "He was late!", "A new paragraph?", "Yes."]
    ]


def test_jsonl_format_and_errors(tmp_path):
    p = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"text": "One sentence. Two sentences."}),
        "",
        json.dumps({"text": "  "}),
        json.dumps({"text": "Para one.\n\nPara two."}),
    ]
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_documents([p]) == [["One sentence.", "Two sentences."], ["Para one.", "Para two."]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"text": "ok."}) + "\n{not json\n" + json.dumps({"body": "x"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(UserError, match=r"bad\.jsonl:2: malformed JSONL"):
        read_documents([bad])
    stats = CorpusStats()
    assert read_documents([bad], on_error="skip", stats=stats) == [["ok."]]
    assert stats.skipped_lines == 2 and stats.skipped == [f"{bad}:2", f"{bad}:3"]
    missing_field = tmp_path / "m.jsonl"
    missing_field.write_text(json.dumps({"body": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"m\.jsonl:1: .*missing field 'text'"):
        read_documents([missing_field])


def test_undecodable_bytes_name_file_and_line(tmp_path):
    p = tmp_path / "latin.txt"
    p.write_bytes(b"good line\nbad \xff\xfe line\nanother good\n")
    with pytest.raises(UserError, match=r"latin\.txt:2: not valid UTF-8"):
        read_documents([p])
    stats = CorpusStats()
    assert read_documents([p], on_error="skip", stats=stats) == [["good line", "another good"]]
    assert stats.skipped_lines == 1


def test_lines_read_in_blocks_keep_their_numbers_and_text(tmp_path):
    # The reader takes lines in blocks of ~64 KB: lines on either side of a block's end, a skipped line in a
    # later block and the line numbers after it must read as one line at a time would.
    lines = [f"sentence {i} with some words \u00e9t\u00e9" + (" ." if i % 7 else "\r") for i in range(6000)]
    for i in (0, 2500, 5000):
        lines[i] = ""  # document breaks
    p = tmp_path / "big.txt"
    p.write_bytes("\ufeff".encode() + "\n".join(lines).encode() + b"\nbad \xff line\nlast line")
    stats = CorpusStats()
    docs = read_documents([p], on_error="skip", stats=stats)
    want, doc = [], []
    for line in [*lines, "last line"]:
        if line.strip():
            doc.append(line.strip())
        elif doc:
            want, doc = [*want, doc], []
    assert docs == [*want, doc] and stats.skipped == [f"{p}:6001"]
    assert stats.bytes == p.stat().st_size and p.stat().st_size > 3 * 2**16
    bad = tmp_path / "big.jsonl"
    rows = [json.dumps({"text": f"Row {i}."}) for i in range(3000)]
    bad.write_bytes("\n".join(rows).encode() + b"\n\xff\n" + "\n".join(rows[:5]).encode() + b"\n{oops\n")
    stats = CorpusStats()
    assert len(read_documents([bad], on_error="skip", stats=stats)) == 3005
    assert stats.skipped == [f"{bad}:3001", f"{bad}:3007"]


def test_missing_path_and_bad_format(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_documents([tmp_path / "nope.txt"])
    with pytest.raises(UserError, match="unknown corpus format"):
        read_documents([tmp_path], "xml")


def test_documents_are_streamed(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("a.\n\nb.\n\nc.\n", encoding="utf-8")
    it = iter_documents([p])
    assert next(it) == ["a."]  # a generator: the rest is not read yet
    assert list(it) == [["b."], ["c."]]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Mr. Smith went home. He slept.", ["Mr. Smith went home.", "He slept."]),
        ('She said "Stop!" Then left.', ['She said "Stop!"', "Then left."]),
        (
            "J. R. R. Tolkien wrote it. See e.g. Fig. 3 here.",
            ["J. R. R. Tolkien wrote it.", "See e.g. Fig. 3 here."],
        ),
        (
            "It cost 3.50 dollars. The U.S. is big. Why? Because.",
            ["It cost 3.50 dollars.", "The U.S. is big.", "Why?", "Because."],
        ),
        ("no capital after. so no split", ["no capital after. so no split"]),
        ("", []),
    ],
)
def test_split_sentences(text, want):
    assert split_sentences(text) == want


def _compressed_copies(plain, tmp_path):
    """``plain`` written as .gz, .xz and .bz2 (the compressors of the standard library)."""
    import bz2
    import gzip
    import lzma

    data = plain.read_bytes()
    out = []
    for suffix, opener in ((".gz", gzip.open), (".xz", lzma.open), (".bz2", bz2.open)):
        p = tmp_path / (plain.name + suffix)
        with opener(p, "wb") as f:
            f.write(data)
        out.append(p)
    return out


def test_compressed_files_read_as_the_plain_file(tmp_path):
    plain = tmp_path / "c.txt"
    # one paragraph per line, a blank line between documents (the large corpus's layout), a BOM and CRLFs
    plain.write_bytes("\ufeffPara one. Still one.\r\nPara two.\n\nDoc two, café.\n\n\nDoc three.".encode())
    stats = CorpusStats()
    want = read_documents([plain], stats=stats)
    assert want == [["Para one. Still one.", "Para two."], ["Doc two, café."], ["Doc three."]]
    for p in _compressed_copies(plain, tmp_path):
        got = CorpusStats()
        assert read_documents([p], stats=got) == want, p.name
        assert got.bytes == stats.bytes  # text bytes, not the stored ones
        assert got.input_bytes == p.stat().st_size != got.bytes  # the progress counts stored bytes
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": "One. Two."}) + "\n", encoding="utf-8")
    for p in _compressed_copies(jsonl, tmp_path):  # c.jsonl.gz is JSONL for --format auto
        assert read_documents([p]) == [["One.", "Two."]]


def test_compressed_file_is_streamed(tmp_path):
    import gzip
    import random

    rng = random.Random(0)
    p = tmp_path / "big.txt.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        for d in range(3000):
            words = " ".join(f"w{rng.randrange(10**9)}" for _ in range(40))
            f.write(f"doc {d} {words}\n\n")
    stats = CorpusStats()
    it = iter_documents([p], stats=stats)
    assert next(it)[0].startswith("doc 0 ")
    # one document in, only the first blocks of the file were read (and decompressed)
    assert 0 < stats.input_bytes < p.stat().st_size / 10
    assert sum(1 for _ in it) == 2999 and stats.input_bytes == p.stat().st_size


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2"])
def test_corrupt_or_truncated_compressed_file_names_it(tmp_path, suffix):
    plain = tmp_path / "c.txt"
    plain.write_text(
        "".join(f"Sentence number {i} of the corpus.\n\n" for i in range(2000)), encoding="utf-8"
    )
    (good,) = [p for p in _compressed_copies(plain, tmp_path) if p.suffix == suffix]
    data = good.read_bytes()
    truncated = tmp_path / f"truncated.txt{suffix}"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    corrupt = tmp_path / f"corrupt.txt{suffix}"
    corrupt.write_bytes(bytes(flipped))
    not_compressed = tmp_path / f"plain.txt{suffix}"
    not_compressed.write_bytes(b"plain text, wrongly named\n")
    for bad in (truncated, corrupt, not_compressed):
        with pytest.raises(UserError, match=rf"^{bad}: corrupt or truncated \w+ file \(") as e:
            read_documents([good, bad])
        assert "\n" not in str(e.value)


def test_directory_of_compressed_files_is_read_recursively_in_order(tmp_path):
    from bertkit.data.corpus import describe_files, expand_paths

    d = tmp_path / "corpus"
    (d / "b").mkdir(parents=True)
    plain = tmp_path / "x.txt"
    plain.write_text("From x.\n", encoding="utf-8")
    gz, xz, _ = _compressed_copies(plain, tmp_path)
    gz.rename(d / "b" / "2.txt.gz")
    xz.rename(d / "1.txt.xz")
    (d / "b" / "0.txt").write_text("From b/0.\n", encoding="utf-8")
    files = expand_paths([d])
    assert [f.relative_to(d).as_posix() for f in files] == ["1.txt.xz", "b/0.txt", "b/2.txt.gz"]
    assert read_documents([d]) == [["From x."], ["From b/0."], ["From x."]]
    line = describe_files([d], files)
    assert "\n" not in line and line.startswith(f"corpus: 3 files under {d} (")
    assert line.endswith(": 1.txt.xz, b/0.txt, b/2.txt.gz")
    assert describe_files([d], files, limit=1).endswith(": 1.txt.xz, ... (2 more)")
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / ".hidden.gz").write_bytes(b"")
    with pytest.raises(UserError, match=rf"^{empty}: directory has no files"):
        read_documents([empty])


def test_paragraphs_format_splits_each_line_into_sentences(tmp_path):
    plain = tmp_path / "c.txt"
    plain.write_text(
        "Dr. Watson came in. He sat down.\nA second paragraph!\n\n\nNext document. It ends here.\n",
        encoding="utf-8",
    )
    assert read_documents([plain], "lines") == [
        ["Dr. Watson came in. He sat down.", "A second paragraph!"],
        ["Next document. It ends here."],
    ]
    want = [
        ["Dr. Watson came in.", "He sat down.", "A second paragraph!"],
        ["Next document.", "It ends here."],
    ]
    for p in [plain, *_compressed_copies(plain, tmp_path)]:
        assert read_documents([p], "paragraphs") == want, p.name
