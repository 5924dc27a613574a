"""What each kind of :mod:`lab.experiment` cell does, and what it leaves behind for the cells after it.

``run_cell(matrix, cell, out, done, info)`` returns the cell's result fields (``primary`` in percent,
``metrics``, ``seed``, ``tokens``, ...); the runner adds the matrix, cell name, timings and machine.
Work directories are ``OUT/<cell name>``. Fine-tuning cells delete their model copy when done (only the
scores are kept), so a matrix of hundreds of cells stays a few GB.

This module dispatches by the cell's kind and runs the data cells (vocab, task text, prepare);
:mod:`.pretrain_cells` and :mod:`.finetune_cells` run the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from lab.experiment.finetune_cells import (
    read_task,
    run_features,
    run_finetune,
    squad_train_part,
    train_source,
)
from lab.experiment.matrix import Cell, Matrix
from lab.experiment.paths import prepared_data, task_text_file
from lab.experiment.pretrain_cells import run_pretrain, run_pretrained, run_random


def run_cell(
    matrix: Matrix, cell: Cell, out: Path, done: dict[str, dict], info: dict, progress: bool = True
) -> dict[str, Any]:
    fn = {
        "vocab": _vocab,
        "tasktext": _tasktext,
        "prepare": _prepare,
        "pretrain": run_pretrain,
        "random": run_random,
        "pretrained": run_pretrained,
        "finetune": run_finetune,
        "features": run_features,
    }[cell.kind]
    return fn(matrix, cell, out, done, progress)


def _vocab(matrix, cell, out, done, progress) -> dict:
    from bertkit.data.vocab import train_vocab

    (out / "vocab").mkdir(parents=True, exist_ok=True)
    if cell.spec.get("vocab_file"):  # a given vocabulary: copied, so every cell reads it from one place
        from bertkit.io import atomic_write

        given = Path(cell.spec["vocab_file"])
        if not given.is_file():
            raise UserError(f"vocab_file {given}: not found")
        with atomic_write(out / "vocab" / "vocab.txt", "wb") as f:
            f.write(given.read_bytes())
        return {
            "primary": None,
            "metrics": {"vocab_file": str(given), "vocab_size": len(given.read_bytes().splitlines())},
        }
    r = train_vocab(
        cell.spec["corpus"], cell.spec["vocab_size"], out / "vocab" / "vocab.txt", progress=progress
    )
    return {"primary": None, "metrics": {k: v for k, v in r.items() if isinstance(v, (int, float, str))}}


def _tasktext(matrix, cell, out, done, progress) -> dict:
    """The training text of the model's ``task_text`` tasks as one corpus file (see
    lab.experiment.task_text); a training file named by several tasks (SST-2 and a 1k-example SST-2 task) is
    written once."""
    from lab.experiment.task_text import squad_documents, task_documents, write_corpus

    def documents():
        seen = set()
        for t in cell.spec["tasks"]:
            source = train_source(matrix, t)
            if source in seen:
                continue
            seen.add(source)
            if t["kind"] == "squad":
                yield from squad_documents(squad_train_part(matrix, t))
            else:
                task = read_task(matrix, t)
                yield from task_documents(task.kind, task.train)

    stats = write_corpus(documents(), task_text_file(out, cell.spec["model"]))
    return {"primary": None, "metrics": stats, "tasks": [t["name"] for t in cell.spec["tasks"]]}


def _prepare(matrix, cell, out, done, progress) -> dict:
    from bertkit.data.shards import prepare

    data = prepared_data(out, cell.name)
    corpus = list(cell.spec["corpus"])
    if cell.spec.get("task_text_of"):
        # the task text goes first: the held-out split is the last documents, the corpus's as for every model
        corpus = [str(task_text_file(out, cell.spec["task_text_of"])), *corpus]
    # prepare resumes: a shard already written for the same text and vocabulary is kept, a stale one replaced
    r = prepare(corpus, out / "vocab" / "vocab.txt", data, cell.spec["max_seq_length"],
                workers=int(cell.spec.get("workers", 1)), fmt=cell.spec.get("format", "auto"),
                progress=progress)  # fmt: skip
    keep = ("documents", "sentences", "tokens", "vocab_size", "max_seq_length", "text_bytes")
    return {"primary": None, "metrics": {k: r[k] for k in keep if k in r}}
