"""``bertkit embed``, ``bertkit convert tf`` and ``bertkit export onnx``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import args as A


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "embed",
        help="sentence embeddings of texts (JSONL or TXT) -> .npy or JSONL",
        description="Encode each input text to a vector. Input: .txt (one text per line) or .jsonl "
        "(one object per line, text in --text-field). Output: .npy (float32 [N, H]) or .jsonl "
        '({"embedding": [...]} per line, with the input\'s "id" when present).',
    )
    p.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    p.add_argument("--input", type=A.existing_file, required=True, metavar="F")
    A.add_output(p, "--out", kind="file", type=Path, metavar="F")
    p.add_argument("--text-field", default="text", help="JSONL field holding the text (default: text)")
    p.add_argument("--pooling", choices=("mean", "cls", "max", "mean_sqrt_len"), default=None)
    p.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    p.add_argument(
        "--prompt-name",
        default=None,
        metavar="NAME",
        help="one of the folder's prompts (config_sentence_transformers.json), prepended to every text "
        "(default: the folder's default_prompt_name, if any)",
    )
    p.add_argument("--batch-size", type=A.positive_int, default=32)
    p.add_argument("--max-seq-length", type=A.int_range(8, 8192), default=None)
    p.add_argument(
        "--device", type=A.device, default=None, help="cpu, cuda, ... (default: cuda if available)"
    )
    p.add_argument(
        "--long-text",
        choices=("truncate", "windows"),
        default="truncate",
        help="texts over --max-seq-length: cut them, or average overlapping windows' vectors (docs/guide/serving.md)",
    )
    A.add_inference_precision(p)
    p.set_defaults(func=embed)

    p = subparsers.add_parser("convert", help="convert a checkpoint from another format")
    sub = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    t = sub.add_parser(
        "tf",
        help="original google-research/bert TensorFlow checkpoint -> Hugging Face-layout dir",
        description="Reads bert_model.ckpt.{index,data-*}, bert_config.json and vocab.txt (no TensorFlow "
        "needed) and writes config.json, model.safetensors, vocab.txt and tokenizer_config.json.",
    )
    t.add_argument("ckpt_dir", type=Path, metavar="CKPT_DIR", help="checkpoint directory or prefix")
    A.add_output(t, "out_dir", type=Path, metavar="OUT_DIR")
    case = t.add_mutually_exclusive_group()
    case.add_argument("--cased", action="store_true", help="keep case (default: guessed from the dir name)")
    case.add_argument("--uncased", action="store_true", help="lowercase the input")
    t.add_argument("--config", type=Path, default=None, help="bert_config.json (default: in CKPT_DIR)")
    t.add_argument("--vocab", type=Path, default=None, help="vocab.txt (default: in CKPT_DIR)")
    t.add_argument(
        "--verify-crc", action="store_true", help="check every tensor's CRC32C (slow in pure Python)"
    )
    t.set_defaults(func=convert_tf)

    p = subparsers.add_parser("export", help="export a model to another runtime")
    sub = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    o = sub.add_parser(
        "onnx",
        help="ONNX graph with dynamic batch and sequence axes",
        description="Inputs input_ids, attention_mask, token_type_ids [batch, sequence] (int64). Outputs "
        "last_hidden_state and pooler_output for an encoder dir, or the head's logits "
        "(sequence classification, token classification, QA start/end).",
    )
    o.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    A.add_output(o, "out", kind="file", type=Path, metavar="OUT.onnx")
    o.add_argument(
        "--opset",
        type=A.int_range(14, 20),  # bertkit.export's MIN_OPSET..MAX_OPSET (imported lazily: torch)
        default=17,
        help="ONNX opset, 14..20 (default 17)",
    )
    o.add_argument(
        "--head", choices=("auto", "encoder"), default="auto", help="encoder: export only BertModel"
    )
    o.add_argument("--no-verify", action="store_true", help="skip the onnxruntime parity check")
    o.add_argument(
        "--int8", action="store_true", help="dynamic int8 quantisation (onnxruntime) of the exported graph"
    )
    o.set_defaults(func=export_onnx)


def _read_texts(path: Path, field: str) -> tuple[list[str], list[Any] | None]:
    from ..io import read_jsonl

    texts: list[str] = []
    ids: list[Any] = []
    if path.suffix in (".jsonl", ".json"):
        for lineno, obj in read_jsonl(path, "input file"):
            if isinstance(obj, str):
                texts.append(obj)
                ids.append(None)
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
                raise UserError(
                    f"{path}: line {lineno}: expected an object with a string field {field!r} "
                    "(choose the field with --text-field)"
                )
            texts.append(obj[field])
            ids.append(obj.get("id"))
        return texts, ids if any(i is not None for i in ids) else None
    with path.open(encoding="utf-8") as f:
        texts = [line.rstrip("\n").rstrip("\r") for line in f]
    while texts and not texts[-1]:
        texts.pop()
    return texts, None


def embed(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch

    from ..io import atomic_write
    from ..sentence.encoder import SentenceEncoder

    if args.out.suffix not in (".npy", ".jsonl"):
        raise UserError(f"{args.out}: output must end in .npy or .jsonl")
    texts, ids = _read_texts(args.input, args.text_field)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    encoder = SentenceEncoder.from_pretrained(
        args.model_dir,
        pooling=args.pooling,
        max_seq_length=args.max_seq_length,
        device=device,
        precision=args.precision,
    )
    prompt = encoder.prompts.text(args.prompt_name)  # an unknown name is refused before any work
    t0 = time.perf_counter()
    if getattr(args, "long_text", "truncate") == "windows":
        from .predict_spans import embed_windows

        vectors = embed_windows(args, texts)
    else:
        vectors = encoder.encode(
            texts,
            batch_size=args.batch_size,
            normalize=args.normalize,
            show_progress=True,
            prompt_name=args.prompt_name,
        )
    seconds = time.perf_counter() - t0
    if args.out.suffix == ".npy":
        with atomic_write(args.out, "wb") as f:
            np.save(f, vectors)
    else:
        with atomic_write(args.out) as f:
            for i, vec in enumerate(vectors):
                row: dict[str, Any] = {"id": ids[i]} if ids is not None else {}
                row["embedding"] = [round(float(x), 7) for x in vec]
                f.write(json.dumps(row) + "\n")
    return {
        "model_dir": str(args.model_dir),
        "input": str(args.input),
        "out": str(args.out),
        "texts": len(texts),
        "dim": encoder.dim,
        "pooling": encoder.pooling,
        "normalized": bool(args.normalize or encoder.normalize),
        "max_seq_length": encoder.max_seq_length,
        "prompt": prompt,
        "precision": encoder.precision_in_use,
        "seconds": round(seconds, 3),
        "texts_per_second": round(len(texts) / seconds, 1) if seconds > 0 else None,
    }


def convert_tf(args: argparse.Namespace) -> dict[str, Any]:
    from ..tf_checkpoint import convert_tf_checkpoint

    lowercase = False if args.cased else True if args.uncased else None
    return convert_tf_checkpoint(
        args.ckpt_dir,
        args.out_dir,
        lowercase=lowercase,
        config_file=args.config,
        vocab_file=args.vocab,
        verify_crc=args.verify_crc,
    )


def export_onnx(args: argparse.Namespace) -> dict[str, Any]:
    from ..export import export_onnx as run_export

    return run_export(
        args.model_dir,
        args.out,
        opset=args.opset,
        encoder_only=args.head == "encoder",
        verify=not args.no_verify,
        int8=args.int8,
    )
