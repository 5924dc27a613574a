"""GLUE readers for the standard TSV layouts (the files of the GLUE download script).

Each task is a ``GlueTask`` describing its files, columns, label set and metric. ``read_glue(task, data_dir,
split)`` returns ``Example`` objects; ``split`` is ``train``, ``dev`` (``dev_matched`` for MNLI), ``dev_mm``
(MNLI mismatched) or ``test`` (labels ``None``).

All files are read with ``csv.QUOTE_NONE`` (sentences contain stray quotes; STS-B in particular breaks
otherwise) and ``utf-8-sig`` (the MRPC files start with a byte-order mark). A row with more fields than the
header (a quoted field with a tab inside) is read again with quoting; a row with too few fields (QQP's
questions broken over lines) is skipped, as the reference processors do. Columns are found by header name
where the file has a header, by position otherwise (CoLA). For CoLA a ``val.tsv`` beside ``train.tsv`` (the
layout of some mirrors, where train.tsv + val.tsv together form the GLUE train set) is appended to train.

Test splits (no labels) keep each row's id (``index``; ``id`` for QQP) as the example's ``guid``:
:func:`submission_sets` lists the test files of a task under their GLUE leaderboard names (``MNLI-m``,
``MNLI-mm`` and ``AX`` for MNLI) and :func:`write_submission` writes ``NAME.tsv`` with the header
``index<TAB>prediction`` and the label names the leaderboard expects.
"""

from __future__ import annotations

import csv
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import open_text

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclass
class Example:
    guid: str
    text_a: str
    text_b: str | None = None
    label: str | float | None = None


@dataclass(frozen=True)
class GlueTask:
    name: str
    labels: tuple[str, ...] | None  # None: regression
    text_a: str | int  # header name or column index
    text_b: str | int | None
    label: str | int
    header: bool = True
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    test_text_a: str | int | None = None  # test files often have other columns
    test_text_b: str | int | None = None
    main_metric: str = "accuracy"
    test_id: str = "index"  # the id column of the test file (the submission's `index`)
    submission: dict[str, str] = field(default_factory=dict)  # leaderboard file name -> test split

    @property
    def is_regression(self) -> bool:
        return self.labels is None


_STD = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}

TASKS: dict[str, GlueTask] = {
    "CoLA": GlueTask(
        "CoLA",
        ("0", "1"),
        3,
        None,
        1,
        header=False,
        files={"train": ("train.tsv", "val.tsv?"), "dev": ("dev.tsv",), "test": ("test.tsv",)},
        test_text_a="sentence",
        main_metric="mcc",
    ),
    "SST-2": GlueTask("SST-2", ("0", "1"), "sentence", None, "label", files=_STD),
    "MRPC": GlueTask("MRPC", ("0", "1"), "#1 String", "#2 String", "Quality", files=_STD, main_metric="f1"),
    "QQP": GlueTask(
        "QQP",
        ("0", "1"),
        "question1",
        "question2",
        "is_duplicate",
        files=_STD,
        main_metric="f1",
        test_id="id",
    ),
    "STS-B": GlueTask("STS-B", None, "sentence1", "sentence2", "score", files=_STD, main_metric="spearman"),
    "MNLI": GlueTask(
        "MNLI",
        ("contradiction", "entailment", "neutral"),
        "sentence1",
        "sentence2",
        "gold_label",
        files={
            "train": ("train.tsv",),
            "dev": ("dev_matched.tsv",),
            "dev_mm": ("dev_mismatched.tsv",),
            "test": ("test_matched.tsv",),
            "test_mm": ("test_mismatched.tsv",),
            "test_ax": ("diagnostic.tsv|../diagnostic/diagnostic.tsv",),
        },
        submission={"MNLI-m": "test", "MNLI-mm": "test_mm", "AX": "test_ax?"},
    ),
    "QNLI": GlueTask("QNLI", ("entailment", "not_entailment"), "question", "sentence", "label", files=_STD),
    "RTE": GlueTask("RTE", ("entailment", "not_entailment"), "sentence1", "sentence2", "label", files=_STD),
    "WNLI": GlueTask("WNLI", ("0", "1"), "sentence1", "sentence2", "label", files=_STD),
}
_ALIASES = {k.lower().replace("-", ""): k for k in TASKS}
_ALIASES.update({"sst": "SST-2", "sts": "STS-B", "mnlim": "MNLI", "mnlimm": "MNLI"})


def get_task(name: str) -> GlueTask:
    key = name.lower().replace("-", "").replace("_", "")
    if key not in _ALIASES:
        raise UserError(f"unknown GLUE task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[_ALIASES[key]]


def _read_tsv(path: Path) -> list[list[str]]:
    """Rows split on tabs with quotes taken literally; a row with more fields than the first (the header)
    is split again honouring quotes (a quoted field holding a tab) when that gives the header's width."""
    with open_text(path, "GLUE file", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    width = None
    for line in lines:
        line = line.rstrip("\r")
        row = line.split("\t") if line else []  # what csv's QUOTE_NONE gives, also with a stray \r inside
        if width is None:
            width = len(row)
        elif len(row) > width and '"' in line:
            try:
                quoted = next(csv.reader([line], delimiter="\t", quotechar='"'), [])
            except csv.Error:  # e.g. a carriage return inside the line: keep the literal split
                quoted = []
            if len(quoted) == width:
                row = quoted
        rows.append(row)
    return rows


def _col(header: list[str] | None, key: str | int, path: Path) -> int:
    if isinstance(key, int):
        return key
    assert header is not None
    names = [h.strip() for h in header]
    if key not in names:
        raise UserError(
            f"{path}: column {key!r} not found in header {names}; is this the right GLUE task's file?"
        )
    return names.index(key)


def task_files(task: GlueTask, data_dir: str | Path, split: str) -> list[Path]:
    data_dir = Path(data_dir)
    if split not in task.files:
        raise UserError(f"{task.name} has no split {split!r}; choose one of {', '.join(task.files)}")
    paths = []
    for name in task.files[split]:
        optional = name.endswith("?")
        candidates = [data_dir / n for n in name.rstrip("?").split("|")]  # the first that exists
        found = [p for p in candidates if p.is_file()]
        if not found:
            if optional:
                continue
            raise UserError(
                f"{task.name} {split} file not found: {candidates[0]} (pass the task's folder as --data-dir)"
            )
        paths.append(found[0])
    return paths


def read_glue(task: GlueTask | str, data_dir: str | Path, split: str = "train") -> list[Example]:
    """Examples of one split. Malformed rows (too few fields, as in QQP's train file) are skipped."""
    task = get_task(task) if isinstance(task, str) else task
    is_test = split.startswith("test")
    out: list[Example] = []
    for path in task_files(task, data_dir, split):
        rows = _read_tsv(path)
        if not rows:
            raise UserError(f"{path} is empty")
        header = None
        if task.header or is_test:
            header, rows = rows[0], rows[1:]
        a_key = task.test_text_a if is_test and task.test_text_a is not None else task.text_a
        b_key = task.test_text_b if is_test and task.test_text_b is not None else task.text_b
        ia = _col(header, a_key, path)
        ib = _col(header, b_key, path) if b_key is not None else None
        il = None if is_test else _col(header, task.label, path)
        iid = _col(header, task.test_id, path) if is_test and header and task.test_id in header else None
        need = max(i for i in (ia, ib, il, iid) if i is not None)
        short = [n for n, row in enumerate(rows) if len(row) <= need]
        if short:  # as in QQP's train file; said with a count, never dropped silently
            logging.getLogger("bertkit").warning(
                "%s: skipped %d malformed row(s) with fewer than %d fields (first at line %d)",
                path, len(short), need + 1, short[0] + 1 + bool(header),
            )  # fmt: skip
        for n, row in enumerate(rows):
            if len(row) <= need:
                continue
            label: str | float | None = None
            if il is not None:
                raw = row[il].strip()
                line = n + 1 + bool(header)
                if task.is_regression:
                    try:
                        label = float(raw)
                    except ValueError:
                        raise UserError(f"{path} line {line}: score {raw!r} is not a number") from None
                    if not 0.0 <= label <= 5.0:  # STS-B's scale; also refuses nan
                        raise UserError(f"{path} line {line}: score {raw!r} is outside {task.name}'s 0-5")
                elif raw not in task.labels:  # else a KeyError deep in the encoding, or a wrong class
                    raise UserError(
                        f"{path} line {line}: label {raw!r} is not one of {task.name}'s labels "
                        f"({', '.join(task.labels)})"
                    )
                else:
                    label = raw
            out.append(
                Example(
                    guid=row[iid].strip() if iid is not None else f"{split}-{path.stem}-{n}",
                    text_a=row[ia].strip(),
                    text_b=row[ib].strip() if ib is not None else None,
                    label=label,
                )
            )
    if not out:
        raise UserError(f"{task.name} {split}: no examples read from {data_dir}")
    return out


def submission_sets(task: GlueTask | str, data_dir: str | Path) -> dict[str, list[Example]]:
    """The test examples of each GLUE leaderboard file of ``task``: ``{"MNLI-m": [...], "MNLI-mm": [...],
    "AX": [...]}`` for MNLI (AX, the diagnostic set, only when ``diagnostic.tsv`` is found beside the task or
    in ``../diagnostic/``), ``{"QQP": [...]}`` and so on for the others."""
    task = get_task(task) if isinstance(task, str) else task
    plan = task.submission or {task.name: "test"}
    out = {}
    for name, split in plan.items():
        optional = split.endswith("?")
        split = split.rstrip("?")
        if optional:
            try:
                task_files(task, data_dir, split)
            except UserError:
                continue  # e.g. no diagnostic.tsv: no AX.tsv
        out[name] = read_glue(task, data_dir, split)
    return out


def submission_label(task: GlueTask, pred: str | float) -> str:
    """A prediction as the leaderboard wants it: the label name, or an STS-B score in [0, 5]."""
    if task.is_regression:
        return f"{min(5.0, max(0.0, float(pred))):.3f}"
    return str(pred)


def write_submission(task: GlueTask | str, path: str | Path, examples: list[Example], preds: list) -> None:
    """``NAME.tsv`` for the GLUE leaderboard: header ``index<TAB>prediction``, one row per test example."""
    from bertkit.io import atomic_write

    task = get_task(task) if isinstance(task, str) else task
    with atomic_write(path) as f:
        f.write("index\tprediction\n")
        for e, p in zip(examples, preds):
            f.write(f"{e.guid}\t{submission_label(task, p)}\n")


def glue_task_data(name: str, data_dir: str | Path, eval_split: str = "dev", predict_test: bool = False):
    """A ``TaskData`` for the fine-tuning driver (train split vs ``eval_split``). MNLI also evaluates the
    mismatched dev set (``dev_mismatched``) when evaluating on matched; ``predict_test`` adds the test sets
    (:func:`submission_sets`) to predict after training."""
    from bertkit.tasks.metrics import glue_metrics
    from bertkit.tasks.spec import TaskData

    task = get_task(name)
    train = read_glue(task, data_dir, "train")
    dev = read_glue(task, data_dir, eval_split)
    labels = list(task.labels) if task.labels is not None else None
    extra = {}
    if task.name == "MNLI" and eval_split == "dev" and (Path(data_dir) / "dev_mismatched.tsv").is_file():
        extra["dev_mismatched"] = read_glue(task, data_dir, "dev_mm")
    tests = submission_sets(task, data_dir) if predict_test else {}
    return TaskData(
        name=task.name if eval_split == "dev" else f"{task.name}-{eval_split}",
        kind="seq",
        train=train,
        dev=dev,
        labels=labels,
        metric=lambda p, g: glue_metrics(task.name, p, g),
        main_metric=task.main_metric,
        dev_file=str(task_files(task, data_dir, eval_split)[0]),
        extra_eval=extra,
        predict_sets=tests,
        write_predict_set=lambda path, exs, preds: write_submission(task, path, exs, preds),
    )
