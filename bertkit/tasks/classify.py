"""Generic text (pair) classification / regression from CSV, TSV or JSONL files.

Fields default to ``text``, ``text_pair`` (optional) and ``label``; all names are settable. The format comes
from the extension (``.csv``, ``.tsv``, ``.jsonl``/``.json``). Labels are kept as strings (classification)
or parsed as floats (``regression=True``). With ``multi_label=True`` a label field holds any number of labels:
a JSON list, or names separated by ``label_sep`` (default ``,``; an empty field is the empty set).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import open_text, read_jsonl
from bertkit.tasks.glue import Example

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


def _rows(path: Path) -> tuple[list[dict], list[str]]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        rows = [obj for _, obj in read_jsonl(path, "input file", objects=True)]
        fields = sorted({k for r in rows for k in r})
        return rows, fields
    delimiter = "\t" if suffix == ".tsv" else ","
    with open_text(path, "input file", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        rows = list(reader)
        return rows, list(reader.fieldnames or [])


def read_classify(
    path: str | Path,
    text_field: str = "text",
    pair_field: str | None = "text_pair",
    label_field: str | None = "label",
    regression: bool = False,
    require_label: bool = True,
    multi_label: bool = False,
    label_sep: str = ",",
) -> list[Example]:
    """Read examples; ``pair_field`` is used when present in the file (a missing pair column is fine)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"file not found: {path}")
    rows, fields = _rows(path)
    if not rows:
        raise UserError(f"{path} is empty: no examples")
    if text_field not in fields:
        raise UserError(f"{path}: column {text_field!r} missing (found {fields}); set it with --text-field")
    use_pair = pair_field is not None and pair_field in fields
    has_label = label_field is not None and label_field in fields
    if require_label and not has_label:
        raise UserError(f"{path}: column {label_field!r} missing (found {fields}); set it with --label-field")
    out = []
    for n, r in enumerate(rows):
        text = r.get(text_field)
        if text is None:
            raise UserError(f"{path} example {n + 1}: field {text_field!r} missing")
        label = None
        if has_label:
            raw = r.get(label_field)
            if multi_label:
                names = raw if isinstance(raw, list) else str(raw or "").split(label_sep)
                label = sorted({str(x).strip() for x in names if str(x).strip()})
            elif raw is None or (isinstance(raw, str) and raw.strip() == ""):
                if require_label:
                    raise UserError(f"{path} example {n + 1}: empty {label_field!r}")
            elif regression:
                try:
                    label = float(raw)
                except (TypeError, ValueError):
                    raise UserError(
                        f"{path} example {n + 1}: {label_field}={raw!r} is not a number"
                    ) from None
            else:
                label = str(raw).strip()
        pair = r.get(pair_field) if use_pair else None
        out.append(Example(f"{path.stem}-{n}", str(text), None if pair in (None, "") else str(pair), label))
    return out


def classify_task_data(
    train_file: str | Path,
    dev_file: str | Path,
    text_field: str = "text",
    pair_field: str | None = "text_pair",
    label_field: str = "label",
    regression: bool = False,
    name: str = "classify",
    multi_label: bool = False,
    label_sep: str = ",",
):
    from bertkit.tasks.metrics import classification_metrics, regression_metrics
    from bertkit.tasks.spec import TaskData

    if multi_label and regression:
        raise UserError("--multi-label and --regression exclude each other")
    train, dev = (
        read_classify(path, text_field, pair_field, label_field, regression, True, multi_label, label_sep)
        for path in (train_file, dev_file)
    )
    if multi_label:
        from bertkit.tasks.multilabel import multilabel_metrics

        labels = sorted({lab for e in train for lab in e.label})
        if not labels:
            raise UserError(f"{train_file}: no labels at all in {label_field!r}")
        return TaskData(
            name, "seq", train, dev, labels, multilabel_metrics(labels), "micro_f1", dev_file=str(dev_file),
            multi_label=True,
        )  # fmt: skip
    if regression:
        return TaskData(name, "seq", train, dev, None, regression_metrics, "spearman", dev_file=str(dev_file))
    labels = sorted(
        {str(e.label) for e in train},
        key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit() else 0, v),
    )
    if len(labels) < 2:
        raise UserError(
            f"{train_file}: only one label ({labels}) in {label_field!r}; classification needs two or more"
        )
    return TaskData(
        name, "seq", train, dev, labels, classification_metrics, "accuracy", dev_file=str(dev_file)
    )
