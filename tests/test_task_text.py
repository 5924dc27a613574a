"""lab.experiment.task_text: tasks' training text as a pre-training corpus in the `lines` format."""

from __future__ import annotations

import os

import pytest

from bertkit.data.corpus import read_documents
from bertkit.tasks.glue import Example
from bertkit.tasks.ner import Sentence
from lab.experiment.task_text import (
    example_sentences,
    group_documents,
    squad_documents,
    task_documents,
    write_corpus,
)


def test_pairs_keep_both_texts_adjacent_and_labels_are_dropped():
    exs = [Example("1", "A  cat\tsat .", "It  sat .", "1"), Example("2", "Dogs bark .", None, "0")]
    assert list(example_sentences("seq", exs)) == ["A cat sat .", "It sat .", "Dogs bark ."]


def test_token_sentences_are_joined_words():
    sents = [Sentence(["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"])]
    assert list(example_sentences("token", sents)) == ["EU rejects German"]
    with pytest.raises(ValueError, match="choice"):
        list(example_sentences("choice", []))


def test_ner_sentences_group_by_their_source_document():
    sents = [
        Sentence(["a"], ["O"], doc=0),
        Sentence(["b", "c"], ["O", "O"], doc=0),
        Sentence(["d"], ["O"], doc=1),
    ]
    assert list(task_documents("token", sents)) == [["a", "b c"], ["d"]]
    # a source document stays whole (the committed task-text cells were built so)
    assert list(task_documents("token", sents, per_document=1)) == [["a", "b c"], ["d"]]
    exs = [Example(str(i), f"s{i}") for i in range(5)]
    assert list(task_documents("seq", exs, per_document=2)) == [["s0", "s1"], ["s2", "s3"], ["s4"]]


def test_grouping_makes_documents_of_n_and_a_short_last_one():
    docs = list(group_documents((str(i) for i in range(7)), per_document=3))
    assert docs == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    with pytest.raises(ValueError):
        list(group_documents([], per_document=0))


def test_squad_article_is_one_document_contexts_then_questions():
    data = {"data": [{"title": "T", "paragraphs": [
        {"context": "Paris is big. It has a river.", "qas": [{"question": "What is big?"}]},
        {"context": "Lyon is small.", "qas": [{"question": " Is Lyon  small? "}]},
    ]}]}  # fmt: skip
    assert list(squad_documents(data)) == [
        ["Paris is big.", "It has a river.", "Lyon is small.", "What is big?", "Is Lyon small?"]
    ]


def test_written_corpus_reads_back_as_the_same_documents(tmp_path):
    docs = [["a b", "c"], ["d e f"], ["g"]]
    path = tmp_path / "t.txt"
    old = os.umask(0o027)
    try:
        stats = write_corpus(docs, path)
    finally:
        os.umask(old)
    assert stats == {"documents": 3, "sentences": 4, "words": 7}
    assert read_documents([path], "lines") == docs
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)  # the umask is respected
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]  # no temp file left
