"""``bertkit distill``: a fine-tuned teacher -> a smaller student (bertkit.distill)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import args as A


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "distill",
        help="distil a fine-tuned teacher into a smaller student (soft targets + labels, or embeddings)",
        description="Student: layers:I,J,K (those teacher layers, e.g. layers:0,2,4), a preset (tiny, mini, "
        "...) of the teacher's architecture, or bert:PRESET (a BERT student, e.g. of a ModernBERT teacher). Tasks: glue (--task-name, --data-dir), classify/ner (--train, --dev), embed (--texts: one text "
        "a line, or .jsonl with a text field). OUT/metrics.json compares teacher and student.",
    )
    p.add_argument("--teacher", type=A.existing_dir, required=True, metavar="DIR")
    p.add_argument("--student", required=True, help="layers:I,J,K, a preset name, or bert:PRESET")
    p.add_argument("--task", required=True, choices=("glue", "classify", "ner", "embed"))
    p.add_argument("--task-name", default=None, help="glue: SST-2, MRPC, ...")
    p.add_argument("--data-dir", type=A.existing_dir, default=None, help="glue: the task's folder")
    p.add_argument("--train", type=A.existing_file, default=None, metavar="F")
    p.add_argument("--dev", type=A.existing_file, default=None, metavar="F")
    p.add_argument("--texts", type=A.existing_file, default=None, metavar="F", help="embed: training texts")
    A.add_output(p, "--out", kind="dir", type=Path, metavar="DIR")
    p.add_argument("--temperature", type=A.positive_float, default=2.0)
    p.add_argument("--alpha", type=A.probability, default=0.5, help="weight of the soft targets")
    p.add_argument("--epochs", type=A.positive_float, default=3.0)
    p.add_argument("--batch-size", type=A.positive_int, default=32)
    p.add_argument("--lr", type=A.positive_float, default=5e-5)
    p.add_argument("--max-seq-length", type=A.positive_int, default=128)
    p.add_argument("--max-train-examples", type=A.positive_int, default=None, help="a seeded sample")
    p.add_argument("--seed", type=int, default=0)
    A.add_training_precision(p)
    p.set_defaults(func=distill_cmd)


def _texts(path: Path) -> list[str]:
    if path.suffix == ".jsonl":
        from ..io import read_jsonl
        from ..sentence.data import text_field

        rows = read_jsonl(path, objects=True)
        return [text_field(path, n, obj, "text", "query", "sentence1") for n, obj in rows]
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def distill_cmd(args: argparse.Namespace) -> dict[str, Any]:
    from ..distill import DistillSettings, distill_embeddings, distill_task
    from ..io import resolve_model_dir

    teacher = resolve_model_dir(args.teacher)
    s = DistillSettings.from_args(args)
    if args.task == "embed":
        if args.texts is None:
            raise UserError("--task embed needs --texts (the texts whose teacher vectors the student learns)")
        return distill_embeddings(teacher, args.student, _texts(args.texts), args.out, s)
    if args.task == "glue":
        if not args.task_name or args.data_dir is None:
            raise UserError("--task glue needs --task-name (e.g. SST-2) and --data-dir")
        from ..tasks.glue import glue_task_data

        task = glue_task_data(args.task_name, args.data_dir)
    else:
        if args.train is None or args.dev is None:
            raise UserError(f"--task {args.task} needs --train and --dev")
        if args.task == "ner":
            from ..tasks.ner import ner_task_data

            task = ner_task_data(args.train, args.dev)
        else:
            from ..tasks.classify import classify_task_data

            task = classify_task_data(args.train, args.dev)
    return distill_task(teacher, args.student, task, args.out, s, max_train_examples=args.max_train_examples)
