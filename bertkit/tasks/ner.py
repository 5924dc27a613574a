"""CoNLL-format NER reader (CoNLL-2003 and friends).

One token per line, the word first and the NER tag last (``word POS chunk NER``, or just ``word TAG``),
a blank line between sentences, ``-DOCSTART-`` lines between documents. Tags may be IOB1 (the original
CoNLL-2003 release: ``I-`` everywhere, ``B-`` only between two adjacent entities of one type) or IOB2
(every entity starts with ``B-``); both are kept as written, and scoring uses conlleval semantics which
handles either. ``to_iob2`` converts IOB1 to IOB2 if wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import open_text


@dataclass
class Sentence:
    words: list[str]
    tags: list[str]
    doc: int = 0  # index of the document (-DOCSTART- block) the sentence belongs to


def read_conll(path: str | Path, tag_column: int = -1, require_tags: bool = True) -> list[Sentence]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"CoNLL file not found: {path}")
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    doc = 0

    def flush() -> None:
        if words:
            sentences.append(Sentence(list(words), list(tags), doc))
            words.clear()
            tags.clear()

    with open_text(path, "CoNLL file") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                flush()
                continue
            parts = line.split()
            if parts[0] == "-DOCSTART-":
                flush()
                if sentences:
                    doc += 1
                continue
            if len(parts) < 2 and require_tags:
                raise UserError(f"{path} line {lineno}: expected 'word ... TAG', got {line!r}")
            words.append(parts[0])
            tags.append(parts[tag_column] if len(parts) > 1 else "O")  # no tag column: "O" (unlabelled input)
    flush()
    if not sentences:
        raise UserError(f"{path} is empty: no sentences found")
    for s in sentences:
        for t in s.tags:
            if t != "O" and not (len(t) > 2 and t[1] == "-" and t[0] in "BIES"):
                raise UserError(f"{path}: tag {t!r} is not O or B-/I-/E-/S-TYPE (is --tag-column right?)")
    return sentences


def to_iob2(tags: list[str]) -> list[str]:
    """IOB1 -> IOB2: an ``I-X`` that starts an entity becomes ``B-X``."""
    out = []
    prev = "O"
    for t in tags:
        if t.startswith("I-") and (prev == "O" or prev[2:] != t[2:]):
            t = "B-" + t[2:]
        out.append(t)
        prev = t
    return out


def label_list(sentences: list[Sentence]) -> list[str]:
    """Sorted tag set with ``O`` first."""
    tags = {t for s in sentences for t in s.tags}
    return ["O"] + sorted(tags - {"O"}, key=lambda t: (t[2:], t[:1]))


def ner_task_data(
    train_file: str | Path, dev_file: str | Path, test_file: str | Path | None = None, name: str = "ner"
):
    from bertkit.tasks.metrics import ner_metrics
    from bertkit.tasks.spec import TaskData

    train = read_conll(train_file)
    dev = read_conll(dev_file)
    extra = {"test": read_conll(test_file)} if test_file else {}
    return TaskData(
        name,
        "token",
        train,
        dev,
        label_list(train),
        ner_metrics,
        "f1",
        dev_file=str(dev_file),
        extra_eval=extra,
    )
