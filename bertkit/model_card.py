"""The ``README.md`` model card every saved fine-tuned or pre-trained model directory gets.

Hugging Face model directories carry a ``README.md`` whose YAML front matter (``library_name``, ``tags``,
``pipeline_tag``) the Hub reads, followed by prose. bertkit writes what a reader needs to trust and reuse the
model: the task, the data, the hyper-parameters, the scores (with the split they were measured on), the
command that made it, and the bertkit and torch versions.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write

PIPELINE_TAGS = {
    "seq": "text-classification",
    "token": "token-classification",
    "choice": "multiple-choice",
    "qa": "question-answering",
    "pretraining": "fill-mask",
    "embed": "sentence-similarity",
}


_COMMAND: list[str] | None = None


def set_command(argv: list[str]) -> None:
    """Record the command being run (``bertkit.cli.main`` calls it), which model cards then quote."""
    global _COMMAND
    _COMMAND = [str(a) for a in argv]


def invoked_command(argv: list[str] | None = None) -> str:
    """The command line being run: the one :func:`set_command` recorded, else this process's ``sys.argv``
    (``bertkit ...`` when it is the CLI)."""
    argv = list(argv if argv is not None else _COMMAND if _COMMAND is not None else sys.argv)
    if not argv:
        return ""
    head = os.path.basename(argv[0])
    if head in ("__main__.py", "bertkit") or argv[0].endswith(os.path.join("bertkit", "__main__.py")):
        head = "bertkit"
    return shlex.join([head, *argv[1:]])


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def _table(rows: Mapping[str, Any]) -> list[str]:
    out = ["| name | value |", "| --- | --- |"]
    out += [f"| {k} | {_value(v)} |" for k, v in rows.items() if v is not None]
    return out


def write_model_card(
    model_dir: str | os.PathLike,
    *,
    title: str,
    kind: str,
    task: str,
    data: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    metrics: Mapping[str, Any] | None = None,
    metrics_split: str = "dev",
    base_model: str | None = None,
    command: str | None = None,
    notes: list[str] | None = None,
) -> Path:
    """Write ``MODEL_DIR/README.md`` (atomically); returns its path. ``kind`` picks the Hub's pipeline tag
    (``seq``, ``token``, ``choice``, ``qa``, ``pretraining``); ``metrics`` are fractions or the task's own
    scale, reported as given."""
    import torch

    from bertkit import __version__

    tag = PIPELINE_TAGS.get(kind)
    lines = ["---", "library_name: bertkit", "tags:", "- bert", f"- {kind}"]
    if tag:
        lines.append(f"pipeline_tag: {tag}")
    if base_model:
        lines.append(f"base_model: {json.dumps(str(base_model))}")
    lines += ["---", "", f"# {title}", "", f"Task: **{task}**.", ""]
    if base_model:
        lines += [f"Fine-tuned from `{base_model}`.", ""]
    lines += ["## Data", "", *_table(data), "", "## Hyper-parameters", "", *_table(hyperparameters), ""]
    if metrics:
        lines += [f"## Results ({metrics_split})", "", *_table(metrics), ""]
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    cmd = invoked_command() if command is None else command
    lines += [
        "## How it was made",
        "",
        "```",
        cmd,
        "```",
        "",
        f"bertkit {__version__}, torch {torch.__version__}. The weights are in the Hugging Face layout "
        "(`config.json`, `model.safetensors` and the tokenizer files): `bertkit` and `transformers` load them.",
        "",
    ]
    path = Path(model_dir) / "README.md"
    with atomic_write(path) as f:
        f.write("\n".join(lines))
    return path
