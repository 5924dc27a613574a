"""How much work a fine-tuning or feature cell is, counted from its task's data (for the matrix ETA).

The matrix's own estimate (:func:`lab.experiment.matrix._finetune_cost`) reads no data: it takes 5,000
training examples of half the sequence length when a task does not say. That is off by an order of magnitude
either way: SST-2's 67k short sentences, SQuAD's strided windows that fill the sequence, full dev sets. Here
the task's files are read once and every example is counted at its own length, in tokens estimated from
words (1.3 WordPiece tokens per whitespace word, the usual rate for English), capped at the task's sequence
length, as bertkit's packed CPU path runs only the real tokens:

- training: 6 FLOPs per encoder parameter and token (forward and backward) plus attention over the sequence,
  for every epoch;
- evaluation: the same forward (2 FLOPs per parameter and token) over the dev set;
- a feature cell (Table 7): one forward over train and dev, then the BiLSTM tagger's epochs.

Cells whose data cannot be read keep the matrix's estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertkit.flops import encoder_flops
from lab.experiment.grid import reuses_a_rate_run
from lab.experiment.matrix import Cell, Matrix, spec_shape
from lab.experiment.paths import weights_of

TOKENS_PER_WORD = 1.3


def _tokens(text: str | None) -> float:
    return TOKENS_PER_WORD * len(text.split()) if text else 0.0


def _sequence_lengths(examples: list, seq: int) -> list[float]:
    """The real tokens of each GLUE or NER example ([CLS] and [SEP]s counted), capped at ``seq``."""
    out = []
    for e in examples:
        if hasattr(e, "words"):  # a NER sentence
            n = TOKENS_PER_WORD * len(e.words) + 2
        else:
            n = _tokens(e.text_a) + _tokens(e.text_b) + (3 if e.text_b else 2)
        out.append(min(float(seq), n))
    return out


def _squad_windows(data: dict, seq: int, stride: int, max_query: int) -> list[float]:
    """The real tokens of each window of each question: the reader's own windows (:func:`doc_windows`) over the
    context's estimated tokens, each beside the question and 3 special tokens."""
    from bertkit.tasks.squad import doc_windows

    out = []
    for article in data["data"]:
        for p in article["paragraphs"]:
            context = round(_tokens(p["context"]))
            for qa in p["qas"]:
                query = min(max_query, round(_tokens(qa["question"])))
                out += [query + 3 + length for _, length in doc_windows(context, seq - query - 3, stride)]
    return out


Lengths = tuple[np.ndarray, np.ndarray]  # real tokens of each training example (or window), of each dev one


def task_lengths(matrix: Matrix, t: dict) -> Lengths | None:
    """A [[task]]'s example lengths (training, dev), or None when its files cannot be read here (or its
    settings are refused: the cell will say so when it runs)."""
    from lab.experiment.finetune_cells import read_task, train_source

    seq = int(t.get("max_seq_length", 128))
    try:
        if t["kind"] == "squad":
            from bertkit.tasks.squad import load_squad_json
            from bertkit.tasks.squad_train import split_articles

            _, file, dev_articles, train_articles = train_source(matrix, t)
            train, dev = split_articles(load_squad_json(file), dev_articles, train_articles)
            stride, query = int(t.get("doc_stride", 128)), int(t.get("max_query_length", 64))
            return tuple(np.array(_squad_windows(part, seq, stride, query)) for part in (train, dev))
        data = read_task(matrix, t)
    except Exception:  # noqa: BLE001 - no data here (a test's config, another machine): the plain estimate
        return None
    return np.array(_sequence_lengths(data.train, seq)), np.array(_sequence_lengths(data.dev, seq))


def cell_work(
    matrix: Matrix, cell: Cell, shapes: dict[str, Any] | None = None, lengths: Lengths | None = None
) -> float | None:
    """Estimated FLOPs of a fine-tuning or feature ``cell`` from its task's data; None for other cells, or
    when the data or the model's shape is not to be had. ``shapes`` (pre-training cell name -> BertConfig)
    and ``lengths`` (the task's :func:`task_lengths`) spare reading them again: :func:`data_costs` passes
    them for the whole matrix."""
    if cell.kind not in ("finetune", "features"):
        return None
    if reuses_a_rate_run(cell):  # a grid's first seed: no work of its own
        return 0.0
    t = cell.spec["task"]
    lengths = lengths if lengths is not None else task_lengths(matrix, t)
    if lengths is None:
        return None
    shapes = shapes if shapes is not None else _shapes(matrix)
    shape = shapes.get(f"pretrain/{weights_of(matrix.raw, cell.spec['model'])}")
    if shape is None:
        return None
    limit = cell.spec.get("max_train_examples", t.get("max_train_examples"))
    train = lengths[0][: int(limit)] if limit and t["kind"] != "squad" else lengths[0]
    dev = lengths[1][: int(t["max_eval_examples"])] if t.get("max_eval_examples") else lengths[1]
    if cell.kind == "features":  # one forward over both sets, then the BiLSTM tagger's epochs on the features
        variant = cell.spec["variant"]
        concat = variant.get("combine", "concat") == "concat" and isinstance(variant["layers"], list)
        width = shape.hidden_size * (len(variant["layers"]) if concat else 1)
        lstm = int(cell.spec.get("hidden_size", 256))
        bilstm = 3 * 2 * 4 * 2 * (width + lstm) * lstm * float(train.sum()) * int(cell.spec.get("epochs", 4))
        return encoder_flops(shape, train) + encoder_flops(shape, dev) + bilstm
    passes = 1 if t.get("freeze_encoder") else 3  # a frozen encoder runs forward only; its head is small
    return float(t.get("epochs", 3)) * encoder_flops(shape, train, passes) + encoder_flops(shape, dev)


def data_costs(matrix: Matrix) -> dict[str, float]:
    """:func:`cell_work` of every fine-tuning and feature cell of ``matrix`` whose data can be read here (each
    task's files read once)."""
    shapes: dict[str, Any] = _shapes(matrix)
    lengths: dict[str, Lengths | None] = {}
    out = {}
    for cell in matrix.cells:
        if cell.kind not in ("finetune", "features"):
            continue
        t = cell.spec["task"]
        if t["name"] not in lengths:
            lengths[t["name"]] = task_lengths(matrix, t)
        if work := cell_work(matrix, cell, shapes, lengths[t["name"]]):  # a reused run keeps the plan's 0
            out[cell.name] = work
    return out


def _shapes(matrix: Matrix) -> dict[str, Any]:
    return {c.name: spec_shape(c.spec) for c in matrix.cells if c.name.startswith("pretrain/")}
