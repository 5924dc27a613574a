"""``bertkit predict`` (a fine-tuned dir on new inputs) and ``bertkit features`` (frozen per-layer features)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertkit.cli import args as A
from bertkit.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser("predict", help="run a fine-tuned model directory on new inputs")
    p.add_argument("model_dir")
    p.add_argument(
        "--input",
        required=True,
        help="CSV/TSV/JSONL (classification), CoNLL or text (NER), SWAG CSV, SQuAD JSON or JSONL with "
        "question/context (QA)",
    )
    A.add_output(p, "--out", kind="file", help="JSON lines to write")
    p.add_argument("--text-field", default="text")
    p.add_argument("--pair-field", default="text_pair")
    p.add_argument("--max-seq-length", type=A.int_range(8, 512), default=None, help="default 128 (QA: 384)")
    p.add_argument("--batch-size", type=A.positive_int, default=64)
    p.add_argument(
        "--long-text",
        choices=("truncate", "windows"),
        default="truncate",
        help="classification: cut long texts, or average the logits of overlapping windows",
    )
    p.add_argument("--aggregation", choices=("first", "max", "simple"), default="first", help="NER entities")
    p.add_argument(
        "--doc-stride", type=A.positive_int, default=None, help="QA: tokens between windows (default 128)"
    )
    p.add_argument(
        "--max-answer-length", type=A.positive_int, default=30, help="QA: longest answer in tokens"
    )
    p.add_argument(
        "--version-2-with-negative", action="store_true", help="QA: offer the null answer (SQuAD v2 models)"
    )
    p.set_defaults(func=run_predict)

    p = subparsers.add_parser(
        "features", help="per-token features from chosen layers (feature-based approach)"
    )
    p.add_argument("model_dir")
    p.add_argument(
        "--input", required=True, help="text file (one sequence per line; 'a ||| b' for pairs) or JSONL"
    )
    A.add_output(
        p, "--out", kind="file", help=".jsonl (tokens + features) or .npz (features, offsets, tokens)"
    )
    p.add_argument("--layers", default="-1,-2,-3,-4", help="comma-separated; -1 = last layer, 0 = embeddings")
    p.add_argument("--text-field", default="text", help="JSONL input: the text field")
    p.add_argument("--max-seq-length", type=A.int_range(8, 512), default=128)
    p.add_argument("--batch-size", type=A.positive_int, default=32)
    p.set_defaults(func=run_features)


def _read_texts(
    path: Path, text_field: str, pair_field: str | None = None
) -> tuple[list[str], list[str | None]]:
    if not path.is_file():
        raise UserError(f"input file not found: {path}")
    if path.suffix.lower() in (".jsonl", ".json", ".csv", ".tsv"):
        from bertkit.tasks.classify import read_classify

        exs = read_classify(path, text_field, pair_field, None, require_label=False)
        return [e.text_a for e in exs], [e.text_b for e in exs]
    texts, pairs = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        a, sep, b = line.partition(" ||| ")
        texts.append(a.strip())
        pairs.append(b.strip() if sep else None)
    if not texts:
        raise UserError(f"{path} is empty")
    return texts, pairs


def run_features(args: argparse.Namespace) -> dict:
    from bertkit.features import extract_features, load_encoder, parse_layers, write_features

    layers = parse_layers(args.layers)
    model, tok = load_encoder(args.model_dir)
    texts, pairs = _read_texts(Path(args.input), args.text_field)
    rows = extract_features(
        model, tok, texts, layers, pairs, args.max_seq_length, args.batch_size, progress=True
    )
    write_features(args.out, rows)
    return {
        "out": args.out,
        "sequences": len(rows),
        "tokens": sum(len(t) for t, _ in rows),
        "layers": list(layers),
        "dim": int(rows[0][1].shape[1]) if rows else 0,
    }


def run_predict(args: argparse.Namespace) -> dict:
    from bertkit.architectures import head_class, head_of, load_config
    from bertkit.io import atomic_write
    from bertkit.tasks.encoding import encode
    from bertkit.tasks.evaluation import predict_features
    from bertkit.tasks.spec import TaskData
    from bertkit.tokenizer import Tokenizer

    model_dir = Path(args.model_dir)
    config = load_config(model_dir)
    arch = (config.architectures or [""])[0]
    kinds = {"ForSequenceClassification": "seq", "ForMultipleChoice": "choice"}  # any architecture's
    head = head_of(arch)
    if head in ("ForQuestionAnswering", "ForTokenClassification"):  # BERT's or ModernBERT's
        from bertkit.cli import predict_spans

        fn = predict_spans.predict_qa if head == "ForQuestionAnswering" else predict_spans.predict_ner
        with atomic_write(args.out) as f:
            n = fn(args, f)
        return {"out": args.out, "architecture": arch, "examples": n}
    if head not in kinds:
        raise UserError(
            f"{model_dir}/config.json: architecture {arch!r} is not a fine-tuned classification, tagging, "
            "question-answering or multiple-choice model"
        )
    kind = kinds[head]
    max_seq_length = args.max_seq_length or 128
    tok = Tokenizer.from_pretrained(model_dir)
    model = head_class(kind, model_dir).from_pretrained(model_dir).eval()
    labels = (
        [config.id2label[i] for i in sorted(config.id2label)]
        if config.id2label
        else [f"LABEL_{i}" for i in range(config.num_labels)]  # as transformers names unnamed labels
    )
    regression = config.problem_type == "regression" or (kind == "seq" and config.num_labels == 1)
    multi_label = config.problem_type == "multi_label_classification"
    saved = config.extra.get("label_thresholds") or {}
    thresholds = [float(saved.get(lab, 0.5)) for lab in labels]  # tuned per label by finetune --multi-label
    path = Path(args.input)
    if kind == "seq":
        texts, pairs = _read_texts(path, args.text_field, args.pair_field)
        from bertkit.tasks.glue import Example

        examples = [Example(str(i), a, b) for i, (a, b) in enumerate(zip(texts, pairs))]
        if args.long_text == "windows":
            if any(b is not None for b in pairs):
                raise UserError(f"{path}: --long-text windows is for single texts; this file has pairs")
            from bertkit.cli.predict_spans import predict_windows

            with atomic_write(args.out) as f:
                n = predict_windows(args, texts, f)
            return {"out": args.out, "architecture": arch, "examples": n, "long_text": "windows"}
    else:
        from bertkit.tasks.swag import read_swag

        examples = read_swag(path, require_label=False)
    task = TaskData("predict", kind, [], examples, None if regression else labels, lambda p, g: {}, "")
    feats = encode(task, tok, examples, max_seq_length)
    raw = predict_features(model, feats, kind, args.batch_size, tok.pad_token_id, progress=True)
    with atomic_write(args.out) as f:
        for e, r in zip(examples, raw):
            if regression:
                row = {"text": e.text_a, "score": r}
            elif kind == "choice":
                row = {"guid": e.guid, "label": r[0], "probs": [round(v, 6) for v in r[1]]}
            else:
                row = {"text": e.text_a}
                if multi_label:
                    row["labels"] = [lab for lab, p, t in zip(labels, r[1], thresholds) if p >= t]
                else:
                    row["label"] = labels[r[0]]
                row["probs"] = dict(zip(labels, (round(v, 6) for v in r[1])))
            if kind != "choice" and e.text_b is not None:  # every text row echoes the pair it scored
                row["text_pair"] = e.text_b
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {"out": args.out, "architecture": arch, "examples": len(examples)}
