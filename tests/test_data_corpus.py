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
