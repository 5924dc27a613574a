"""Files of retrieval training and evaluation, and the SQuAD article split.

- pairs (train-embed, train-rerank): JSONL, one ``{"query": str, "positive": str, "negatives": [str]}`` per
  line (``negatives`` optional; ``anchor`` is accepted for ``query``), or scored pairs
  ``{"sentence1": str, "sentence2": str, "score": float}`` (also a GLUE STS-B ``.tsv``) for the cosine and
  CoSENT losses; for train-rerank also labelled pairs ``{"query": str, "passage": str, "label": 0|1}``;
- corpus: JSONL ``{"id": any, "text": str}``;
- queries: JSONL ``{"id": any, "text": str, "relevant": [corpus ids]}``.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import atomic_write, read_jsonl


@dataclass
class Pair:
    """One training example: a query and its positive (plus given negatives), or a scored pair."""

    query: str
    positive: str
    negatives: list[str] = field(default_factory=list)
    score: float | None = None  # scored pairs (cosine / CoSENT) and labelled rerank pairs


def text_field(path: Path, lineno: int, obj: dict, *names: str) -> str:
    for n in names:
        if isinstance(obj.get(n), str) and obj[n].strip():
            return obj[n]
    raise UserError(f"{path}: line {lineno}: expected a non-empty string field {names[0]!r}")


def read_pairs(path: str | os.PathLike) -> list[Pair]:
    """Training pairs of any of the module docstring's kinds (all lines of one file of one kind)."""
    path = Path(path)
    if path.suffix == ".tsv":
        return [Pair(a, b, score=s) for a, b, s in read_sts(path)]
    pairs: list[Pair] = []
    kind = None
    for lineno, obj in read_jsonl(path, objects=True):
        this = "scored" if "score" in obj else "labelled" if "label" in obj else "positive"
        if kind is not None and this != kind:
            raise UserError(
                f"{path}: line {lineno}: a {this} pair in a file of {kind} pairs; use one kind per file"
            )
        kind = this
        if this == "scored":
            a, b = text_field(path, lineno, obj, "sentence1"), text_field(path, lineno, obj, "sentence2")
            score = obj["score"]
            if not isinstance(score, (int, float)) or isinstance(score, bool):
                raise UserError(f"{path}: line {lineno}: 'score' must be a number")
            pairs.append(Pair(a, b, score=float(score)))
        elif this == "labelled":
            q, p = text_field(path, lineno, obj, "query", "anchor"), text_field(path, lineno, obj, "passage")
            if obj["label"] not in (0, 1):
                raise UserError(f"{path}: line {lineno}: 'label' must be 0 or 1")
            pairs.append(Pair(q, p, score=float(obj["label"])))
        else:
            q, p = text_field(path, lineno, obj, "query", "anchor"), text_field(path, lineno, obj, "positive")
            negs = obj.get("negatives", [])
            if not isinstance(negs, list) or not all(isinstance(n, str) for n in negs):
                raise UserError(f"{path}: line {lineno}: 'negatives' must be a list of strings")
            pairs.append(Pair(q, p, list(negs)))
    if not pairs:
        raise UserError(f"{path}: no pairs")
    return pairs


def read_corpus(path: str | os.PathLike) -> tuple[list[Any], list[str]]:
    """(ids, texts) of a corpus file; ids must be unique."""
    path = Path(path)
    ids, texts, seen = [], [], set()
    for lineno, obj in read_jsonl(path, objects=True):
        if "id" not in obj:
            raise UserError(f"{path}: line {lineno}: missing 'id'")
        key = json.dumps(obj["id"], sort_keys=True)
        if key in seen:
            raise UserError(f"{path}: line {lineno}: id {key} appears twice")
        seen.add(key)
        ids.append(obj["id"])
        texts.append(text_field(path, lineno, obj, "text"))
    if not ids:
        raise UserError(f"{path}: empty corpus")
    return ids, texts


def read_queries(path: str | os.PathLike) -> tuple[list[str], list[set]]:
    """(query texts, relevant corpus-id sets as JSON keys) of a queries file."""
    path = Path(path)
    texts, relevant = [], []
    for lineno, obj in read_jsonl(path, objects=True):
        rel = obj.get("relevant")
        if not isinstance(rel, list) or not rel:
            raise UserError(f"{path}: line {lineno}: 'relevant' must be a non-empty list of corpus ids")
        texts.append(text_field(path, lineno, obj, "text", "query"))
        relevant.append({json.dumps(r, sort_keys=True) for r in rel})
    if not texts:
        raise UserError(f"{path}: no queries")
    return texts, relevant


def squad_split(
    path: str | os.PathLike, train_articles: int = 40, eval_articles: int = 8
) -> tuple[list[dict], list[dict], list[dict]]:
    """SQuAD v1.1 by article, in file order: (train pairs, eval queries, corpus).

    Train pairs are (question, its paragraph) of the first ``train_articles`` articles; eval queries are
    the questions of the next ``eval_articles`` with their paragraph's id as the one relevant document;
    the corpus is every paragraph of the file (id ``"<article index>-<paragraph index>"``)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: SQuAD file not found")
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{path}: not a SQuAD JSON file ({e})") from None
    if len(articles) < train_articles + eval_articles:
        raise UserError(
            f"{path}: {len(articles)} articles, fewer than --train-articles {train_articles} + "
            f"--eval-articles {eval_articles}"
        )
    train, queries, corpus = [], [], []
    for a, art in enumerate(articles):
        for p, para in enumerate(art["paragraphs"]):
            pid = f"{a}-{p}"
            corpus.append({"id": pid, "text": para["context"]})
            for qa in para["qas"]:
                if a < train_articles:
                    train.append({"query": qa["question"], "positive": para["context"]})
                elif a < train_articles + eval_articles:
                    queries.append({"id": qa["id"], "text": qa["question"], "relevant": [pid]})
    return train, queries, corpus


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> None:
    with atomic_write(path) as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_sts(path: str | os.PathLike) -> list[tuple[str, str, float]]:
    """GLUE STS-B TSV (header; sentence1, sentence2, score columns) -> [(s1, s2, score)].

    Read with ``csv.QUOTE_NONE``: the sentences contain unbalanced quote characters.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: STS file not found")
    rows: list[tuple[str, str, float]] = []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or not {"sentence1", "sentence2", "score"} <= set(header):
            raise UserError(f"{path}: line 1: expected a header with sentence1, sentence2 and score columns")
        c1, c2, cs = (header.index(k) for k in ("sentence1", "sentence2", "score"))
        for lineno, row in enumerate(reader, start=2):
            try:
                rows.append((row[c1], row[c2], float(row[cs])))
            except (IndexError, ValueError):
                raise UserError(f"{path}: line {lineno}: malformed row ({len(row)} columns)") from None
    return rows
