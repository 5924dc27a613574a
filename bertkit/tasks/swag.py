"""SWAG reader (the ``train.csv`` / ``val.csv`` of the SWAG release).

Columns: ``sent1`` (the context), ``sent2`` (the start of the next sentence), ``ending0..3`` and ``label``
(absent in test). Each choice is encoded as the pair ``(sent1, sent2 + " " + ending_i)``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import open_text

N_CHOICES = 4


@dataclass
class ChoiceExample:
    guid: str
    context: str
    endings: list[str]  # full second segments, one per choice
    label: int | None = None


def read_swag(path: str | Path, require_label: bool = True) -> list[ChoiceExample]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"SWAG file not found: {path}")
    with open_text(path, "SWAG file", newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if not fields:
            raise UserError(f"{path} is empty")
        needed = ["sent1", "sent2"] + [f"ending{i}" for i in range(N_CHOICES)]
        if require_label:
            needed.append("label")
        for c in needed:
            if c not in fields:
                raise UserError(f"{path}: column {c!r} missing (found {fields}); SWAG CSV needs {needed}")
        out = []
        for n, row in enumerate(reader):
            short = [c for c in needed if row.get(c) is None]  # DictReader fills a short row with None
            if short:
                raise UserError(
                    f"{path} row {n + 2}: fields {', '.join(short)} missing (the row is too short)"
                )
            if require_label and not row["label"].strip():
                raise UserError(
                    f"{path} row {n + 2}: the label is empty; give the right ending's number 0..3"
                )
            label = None
            if "label" in fields and row.get("label") not in (None, ""):
                try:
                    label = int(row["label"])
                except ValueError:
                    raise UserError(f"{path} row {n + 2}: label {row['label']!r} is not 0..3") from None
                if not 0 <= label < N_CHOICES:
                    raise UserError(f"{path} row {n + 2}: label {label} is not 0..3")
            start = row["sent2"].strip()
            endings = [f"{start} {row[f'ending{i}'].strip()}".strip() for i in range(N_CHOICES)]
            out.append(ChoiceExample(f"{path.stem}-{n}", row["sent1"].strip(), endings, label))
    if not out:
        raise UserError(f"{path} is empty: no rows after the header")
    return out


def swag_task_data(train_file: str | Path, dev_file: str | Path, name: str = "swag"):
    from bertkit.tasks.metrics import accuracy
    from bertkit.tasks.spec import TaskData

    train = read_swag(train_file)
    dev = read_swag(dev_file)
    return TaskData(
        name,
        "choice",
        train,
        dev,
        None,
        lambda p, g: {"accuracy": accuracy(p, g)},
        "accuracy",
        dev_file=str(dev_file),
    )
