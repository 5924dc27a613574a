"""The unlabelled text of fine-tuning tasks' training splits, written as a pre-training corpus.

Task-adaptive pre-training (Gururangan et al., 2020, "Don't Stop Pretraining") pre-trains on the text of the
task's own training inputs, labels dropped. ``python -m lab experiment`` uses it (a model's ``task_text = [...]``) to
ask whether pre-training fails to transfer to a task because the corpus holds too little of that task's kind of
text. Only training splits are read: a task's dev and test text never reaches pre-training.

The file is in the original release's ``lines`` format (one sentence per line, a blank line between documents),
so :func:`bertkit.data.shards.prepare` reads it like any other corpus file. Documents group consecutive
examples (``sentences_per_document`` sentences): one example per document would give pre-training sequences of a
dozen tokens and next-sentence pairs with nothing to continue. A pair task keeps each example's two texts next
to each other; a SQuAD article is one document (its paragraphs' sentences, then its questions).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertkit.io import atomic_write

SENTENCES_PER_DOCUMENT = 32


def _clean(text: str) -> str:
    """One line of text: whitespace runs (newlines and tabs included) become one space."""
    return " ".join(str(text).split())


def example_sentences(kind: str, examples: Iterable) -> Iterator[str]:
    """The input text of each training example, labels dropped: ``seq`` examples give ``text_a`` (then
    ``text_b``), ``token`` sentences their ``words`` joined by spaces. Empty texts are skipped."""
    if kind not in ("seq", "token"):
        raise ValueError(f"task kind {kind!r} has no text reader (seq or token)")
    return _sentences(kind, examples)


def _sentences(kind: str, examples: Iterable) -> Iterator[str]:
    for ex in examples:
        texts = [ex.text_a, ex.text_b] if kind == "seq" else [" ".join(ex.words)]
        for t in texts:
            line = _clean(t) if t is not None else ""
            if line:
                yield line


def group_documents(
    sentences: Iterable[str], per_document: int = SENTENCES_PER_DOCUMENT
) -> Iterator[list[str]]:
    """Consecutive sentences in documents of ``per_document`` (the last one may be shorter)."""
    if per_document < 1:
        raise ValueError(f"per_document must be >= 1, got {per_document}")
    doc: list[str] = []
    for s in sentences:
        doc.append(s)
        if len(doc) == per_document:
            yield doc
            doc = []
    if doc:
        yield doc


def task_documents(
    kind: str, examples: list, per_document: int = SENTENCES_PER_DOCUMENT
) -> Iterator[list[str]]:
    """A task's training examples as documents: NER sentences by their source document (CoNLL's -DOCSTART-
    blocks, the text's own documents, whatever their length: a file without those lines is one document),
    everything else ``per_document`` consecutive sentences at a time."""
    if kind == "token":
        by_doc: dict[int, list] = {}
        for sentence in examples:
            by_doc.setdefault(getattr(sentence, "doc", 0), []).append(sentence)
        for group in by_doc.values():
            yield list(example_sentences(kind, group))
        return
    yield from group_documents(example_sentences(kind, examples), per_document)


def squad_documents(data: dict) -> Iterator[list[str]]:
    """One document per SQuAD article (a ``load_squad_json`` dict, already cut to the training articles): each
    paragraph's sentences, then the article's questions."""
    from bertkit.data.corpus import split_sentences

    for article in data["data"]:
        doc: list[str] = []
        questions: list[str] = []
        for p in article["paragraphs"]:
            doc.extend(s for s in (_clean(x) for x in split_sentences(p["context"])) if s)
            questions.extend(q for q in (_clean(qa["question"]) for qa in p["qas"]) if q)
        doc.extend(questions)
        if doc:
            yield doc


def write_corpus(documents: Iterable[list[str]], path: str | os.PathLike) -> dict[str, int]:
    """Write ``documents`` to ``path`` atomically in the ``lines`` format; returns documents, sentences and
    words written."""
    stats = {"documents": 0, "sentences": 0, "words": 0}
    with atomic_write(Path(path)) as f:
        for doc in documents:
            if stats["documents"]:
                f.write("\n")
            for s in doc:
                f.write(s + "\n")
                stats["words"] += len(s.split())
            stats["sentences"] += len(doc)
            stats["documents"] += 1
    return stats
