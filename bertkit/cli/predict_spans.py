"""``bertkit predict`` on question-answering and tagging dirs, and ``--long-text windows``: files of any
size through the server's own pipelines (the model calls of ``serving.routes``: ``qa``, ``ner``, ``predict``), so a file gives
the answers and entities (with character offsets) the routes give."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import read_jsonl

CHUNK = 32  # questions / texts handed to the pipeline at a time (the progress bar's unit)


def service(
    model_dir: str | Path, max_seq_length: int | None, device: str | None = None, precision: str = "fp32"
) -> Any:
    """The server's service with no request limits (a file is not a request) and plain batches."""
    from bertkit.serving.limits import Limits
    from bertkit.serving.service import InferenceService

    big = 1 << 62
    limits = Limits(max_body_bytes=big, max_text_chars=big, max_batch_size=CHUNK, max_request_tokens=big)
    return InferenceService(
        model_dir,
        limits=limits,
        max_length=max_seq_length,
        device=device,
        batching={"enabled": False},
        precision=precision,
    )


def read_questions(path: Path) -> list[tuple[str, str, str]]:
    """(id, question, context) from a SQuAD JSON file or JSONL rows with ``question`` and ``context``."""
    if not path.is_file():
        raise UserError(f"input file not found: {path}")
    if path.suffix.lower() == ".json":
        from bertkit.tasks.squad import load_squad_json

        data = load_squad_json(path)
        items = []
        for article in data["data"]:
            for para in article.get("paragraphs", []):
                for qa in para.get("qas", []):
                    items.append((str(qa.get("id", len(items))), qa["question"], para["context"]))
        return items
    items = []
    for n, row in read_jsonl(path, "input file"):
        try:
            items.append((str(row.get("id", len(items))), row["question"], row["context"]))
        except (KeyError, TypeError, AttributeError):
            raise UserError(
                f"{path}:{n}: expected a JSON object with 'question' and 'context' (and optionally 'id')"
            ) from None
    return items


def _chunks(items: list, desc: str) -> Iterator[list]:
    from tqdm.auto import tqdm

    with tqdm(total=len(items), desc=desc, unit="ex", dynamic_ncols=True) as bar:
        for start in range(0, len(items), CHUNK):
            chunk = items[start : start + CHUNK]
            yield chunk
            bar.update(len(chunk))


def predict_qa(args: Any, out: Any) -> int:
    from bertkit.serving.routes import qa

    svc = service(args.model_dir, args.max_seq_length or 384)
    items = read_questions(Path(args.input))
    if not items:
        raise UserError(f"{args.input}: no questions")
    n = 0
    for chunk in _chunks(items, "qa"):
        answers = qa.answer(
            svc,
            [(q, c) for _, q, c in chunk],
            doc_stride=args.doc_stride,
            max_answer_length=args.max_answer_length,
            handle_impossible_answer=args.version_2_with_negative,
        )
        for (qid, question, _), a in zip(chunk, answers):
            out.write(json.dumps({**a, "id": qid, "question": question}, ensure_ascii=False) + "\n")
            n += 1
    svc.close()
    return n


def predict_ner(args: Any, out: Any) -> int:
    """CoNLL files keep their words (the tags are ``finetune ner``'s); other text files are one text a line."""
    from bertkit.serving.routes.ner import ner
    from bertkit.tasks.ner import read_conll

    svc = service(args.model_dir, args.max_seq_length or 128)
    path = Path(args.input)
    try:
        rows: list[dict[str, Any]] = [
            {"words": s.words} for s in read_conll(path, require_tags=False) if s.words
        ]
    except UserError:
        rows = [{"text": line} for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise UserError(f"{path} is empty")
    for chunk in _chunks(rows, "ner"):
        for row in chunk:
            result = ner(svc, row.get("text"), row.get("words"), args.aggregation)
            out.write(json.dumps({**row, **result}, ensure_ascii=False) + "\n")
    svc.close()
    return len(rows)


def predict_windows(args: Any, texts: list[str], out: Any) -> int:
    """Sequence classification with ``--long-text windows``: each text's windows' logits averaged."""
    from bertkit.serving.routes.predict import predict

    svc = service(args.model_dir, args.max_seq_length or 128)
    for chunk in _chunks(texts, "predict"):
        for text, pred in zip(chunk, predict(svc, chunk, long_text="windows")):
            out.write(json.dumps({"text": text, **pred}, ensure_ascii=False) + "\n")
    svc.close()
    return len(texts)


def embed_windows(args: Any, texts: list[str]) -> Any:
    """``bertkit embed --long-text windows``: each text's vector is the mean of its windows' pooled vectors
    (windows of ``--max-seq-length`` tokens, half a window apart), as the server's ``long_text: windows``."""
    import numpy as np

    svc = service(args.model_dir, args.max_seq_length, device=args.device, precision=args.precision)
    if args.pooling:
        svc.encoder.pooling = args.pooling
    out = [
        # --normalize absent: the model's own setting (None), not raw vectors
        svc.embed(
            chunk,
            normalize=args.normalize or None,
            long_text="windows",
            prompt_name=getattr(args, "prompt_name", None),
        )[0]
        for chunk in _chunks(texts, "embed")
    ]
    svc.close()
    return np.concatenate(out) if out else np.zeros((0, svc.encoder.dim), dtype=np.float32)


__all__ = ["embed_windows", "predict_ner", "predict_qa", "predict_windows", "read_questions", "service"]
