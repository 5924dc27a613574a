"""``python -m bertkit.demo`` (what ``make run`` runs): BERT pre-training end to end, offline, in minutes on a CPU.

1. **Corpus.** By default the English documentation that ships with Python itself: the docstrings of
   the standard library's modules, classes and functions, read from the installation's ``.py`` sources
   with :mod:`ast` (nothing is imported or downloaded; no text is stored in this repository). One
   document per module, the original release's format (one sentence per line, blank line between
   documents). ``--corpus PATH...`` uses your own text files instead (any format ``bertkit prepare`` reads).
2. **Vocabulary** (WordPiece, ``bertkit vocab``) and **data** (token shards, ``bertkit prepare``).
3. **Pre-training** of a small BERT from scratch with MLM + NSP (``bertkit pretrain``), printing the
   masked-LM accuracy as it rises and evaluating on held-out documents.
4. **Fill-mask** predictions for a few sentences, and a **report** in ``--out`` (default ``runs/demo``):
   ``report.json`` (metrics, timings, predictions), ``curves.png``, ``metrics.jsonl``, ``model/``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import sys
import sysconfig
import time
from pathlib import Path

from bertkit.io import atomic_write, atomic_write_json

# Sentences for the fill-mask show-case on the default corpus (their own words, about Python).
DEFAULT_PROBES = [
    "Return a new [MASK] containing the items of the iterable.",
    "If the file does not exist, an [MASK] is raised.",
    "This module provides functions for working with [MASK] and directories.",
    "The default value is [MASK].",
    "Raise a [MASK] if the argument is not an integer.",
]


# ------------------------------------------------------------------------------------------------ corpus


def _clean_docstring(doc: str) -> list[str]:
    """Paragraphs of prose from a docstring: drop doctest lines, code blocks and reST markup."""
    paras, cur = [], []
    for raw in doc.splitlines():
        line = raw.strip()
        if not line:
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        if line.startswith((">>>", "...", "$ ", "%", "|")) or re.fullmatch(r"[-=~^*#+]{3,}", line):
            continue
        if raw.startswith(("    ", "\t")) and not cur:
            continue  # an indented block after a blank line: code or a table
        cur.append(line)
    if cur:
        paras.append(" ".join(cur))
    out = []
    for p in paras:
        p = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", p)  # :func:`x` -> x
        p = p.replace("``", "").replace("`", "")
        letters = sum(ch.isalpha() for ch in p)
        if len(p) >= 20 and letters / max(len(p), 1) > 0.6:
            out.append(p)
    return out


def _split_sentences(text: str) -> list[str]:
    try:
        from bertkit.data.corpus import split_sentences

        return split_sentences(text)
    except ImportError:
        return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if s]


def python_docs_corpus(out_file: str | os.PathLike, max_bytes: int = 6_000_000) -> dict:
    """Write the standard library's docstrings to ``out_file`` (one module per document). Returns stats."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in stdlib.rglob("*.py")
        if not any(
            part in ("test", "tests", "idlelib", "site-packages", "lib2to3", "__pycache__")
            for part in p.parts
        )
    )
    docs = 0
    sentences = 0
    size = 0
    with atomic_write(out_file) as f:
        for path in files:
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except (SyntaxError, ValueError):
                continue
            paras: list[str] = []
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=True)
                    if doc:
                        paras.extend(_clean_docstring(doc))
            lines = [s for p in paras for s in _split_sentences(p) if len(s.split()) >= 3]
            if len(lines) < 2:
                continue
            text = "\n".join(lines) + "\n\n"
            f.write(text)
            docs += 1
            sentences += len(lines)
            size += len(text.encode())
            if size >= max_bytes:
                break
    if docs < 2:
        raise RuntimeError(f"found too little documentation under {stdlib} to build a corpus; pass --corpus")
    return {"source": f"docstrings of the Python {sys.version.split()[0]} standard library at {stdlib}",
            "documents": docs, "sentences": sentences, "bytes": size, "file": str(out_file)}  # fmt: skip


def build_data(
    corpus: list[str],
    work: Path,
    vocab_size: int = 8000,
    max_seq_length: int = 128,
    progress: bool = True,
) -> tuple[Path, dict]:
    """Vocabulary + shards for ``corpus`` under ``work``; returns (data_dir, info)."""
    from bertkit.data.shards import prepare
    from bertkit.data.vocab import train_vocab

    vocab = work / "vocab.txt"
    data_dir = work / "data"
    t0 = time.perf_counter()
    vinfo = train_vocab(corpus, vocab_size, vocab, progress=progress)
    t1 = time.perf_counter()
    pinfo = prepare(corpus, vocab, data_dir, max_seq_length=max_seq_length, progress=progress)
    t2 = time.perf_counter()
    return data_dir, {
        "vocab": {k: v for k, v in vinfo.items() if isinstance(v, (int, float, str))},
        "prepare": {k: v for k, v in pinfo.items() if isinstance(v, (int, float, str))},
        "vocab_s": round(t1 - t0, 2),
        "prepare_s": round(t2 - t1, 2),
    }


def corpus_probes(corpus: list[str], n: int = 5, seed: int = 0) -> list[str]:
    """Sentences from a user's corpus with one longer word replaced by [MASK]."""
    from bertkit.data.corpus import read_documents

    docs = read_documents(corpus)
    sents = [s for d in docs for s in d if 6 <= len(s.split()) <= 25]
    rng = random.Random(seed)
    out = []
    for s in rng.sample(sents, min(n, len(sents))):
        words = s.split()
        cands = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 3]
        if cands:
            i = rng.choice(cands)
            out.append(" ".join(words[:i] + ["[MASK]"] + words[i + 1 :]))
    return out


def time_one_step(
    data_dir: Path, preset: str, overrides: dict, batch_size: int, seq: int, lr: float
) -> float:
    """Median seconds of a training step (forward, backward, AdamW) of this model on this data, after warm-up."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.data import PretrainingDataset
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.pretrain import make_loss_fn
    from bertkit.train.batches import Batches
    from bertkit.train.optim import build_optimizer

    ds = PretrainingDataset(data_dir, max_seq_length=seq)
    batches = Batches(ds, batch_size, ds.collate, seed=12345)
    rng = torch.get_rng_state()
    model = BertForPreTraining(BertConfig.preset(preset, vocab_size=ds.vocab_size, **overrides))
    opt = build_optimizer(model, lr=lr)
    loss_fn = make_loss_fn("mlm+nsp")
    times = []
    for i in range(8):
        batch = next(batches)
        t = time.perf_counter()
        loss, _ = loss_fn(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - t)
    torch.set_rng_state(rng)
    return sorted(times)[len(times) // 2]


def tiny_data(
    work: str | os.PathLike, max_bytes: int = 150_000, vocab_size: int = 1000, max_seq_length: int = 64
) -> Path:
    """A small prepared data directory from the first ``max_bytes`` of the stdlib-docstring corpus (tests)."""
    work = Path(work)
    if (work / "data" / "manifest.json").is_file():
        return work / "data"
    python_docs_corpus(work / "corpus.txt", max_bytes=max_bytes)
    data_dir, _ = build_data([str(work / "corpus.txt")], work, vocab_size, max_seq_length, progress=False)
    return data_dir


# -------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bertkit.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="+", help="your own text files/directories (default: Python's docs)")
    ap.add_argument("--out", default="runs/demo", help="report directory (default runs/demo)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: fit --train-seconds)")
    ap.add_argument(
        "--train-seconds",
        type=float,
        default=330.0,  # with set-up, `make run` stays well under 10 minutes on 2 cores
        help="without --steps: time a few steps first and train about this long (clamped to 200..3000 steps)",
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=4000)
    ap.add_argument("--preset", default="mini", help="model size (tiny, mini, small, ...)")
    ap.add_argument(
        "--layers", type=int, default=2, help="override the preset's number of layers (default 2)"
    )
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import shutil

    shutil.rmtree(out / "run", ignore_errors=True)  # the demo always trains afresh
    t_start = time.perf_counter()
    timings: dict[str, float] = {}

    print(f"[1/4] corpus -> {out}", flush=True)
    if args.corpus:
        corpus = list(args.corpus)
        corpus_info = {"source": "user", "paths": corpus}
        probes = corpus_probes(corpus)
    else:
        cfile = out / "corpus" / "python-docs.txt"
        corpus_info = python_docs_corpus(cfile)
        corpus = [str(cfile)]
        probes = list(DEFAULT_PROBES)
    print(f"      {json.dumps({k: v for k, v in corpus_info.items() if k != 'paths'})}", flush=True)
    timings["corpus_s"] = round(time.perf_counter() - t_start, 2)

    print("[2/4] WordPiece vocabulary and token shards", flush=True)
    data_dir, data_info = build_data(
        corpus, out, args.vocab_size, args.max_seq_length, progress=not args.quiet
    )
    timings.update(vocab_s=data_info["vocab_s"], prepare_s=data_info["prepare_s"])
    print(f"      vocab {data_info['vocab'].get('vocab_size', '?')} tokens; data in {data_dir}", flush=True)

    from bertkit.pretrain import PretrainConfig, pretrain

    # short from-scratch training on a small corpus: dropout only slows it down
    overrides = {
        "max_position_embeddings": max(128, args.max_seq_length),
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }
    if args.layers:
        overrides["num_hidden_layers"] = args.layers
    if args.steps is None:
        per_step = time_one_step(
            data_dir, args.preset, overrides, args.batch_size, args.max_seq_length, args.lr
        )
        args.steps = int(min(3000, max(200, args.train_seconds / per_step)))
        print(
            f"      {per_step * 1000:.0f} ms per step here: {args.steps} steps fit in ~{args.train_seconds:.0f} s"
        )
    cfg = PretrainConfig(
        data=str(data_dir),
        out=str(out / "run"),
        preset=args.preset,
        model_overrides=overrides,
        objective="mlm+nsp",
        steps=args.steps,
        batch_size=args.batch_size,
        max_seq_length=args.max_seq_length,
        lr=args.lr,
        warmup=0.06,
        seed=args.seed,
        log_every=max(args.steps // 40, 1),
        checkpoint_every=max(args.steps // 3, 1),
        eval_every=max(args.steps // 4, 1),
        eval_batches=8,
        progress=not args.quiet,
    )
    print(
        f"[3/4] pre-training BERT-{args.preset} ({args.layers or 'preset'} layers, MLM + NSP) for {args.steps} steps of "
        f"{args.batch_size} x {args.max_seq_length} tokens on {torch.get_num_threads()} CPU thread(s)",
        flush=True,
    )

    every = max(args.steps // 10, 1)

    def show(rec: dict) -> None:
        if rec["step"] % every and rec["step"] != args.steps:
            return
        from tqdm import tqdm

        tqdm.write(
            f"      step {rec['step']:5d}  loss {rec['loss']:.3f}  MLM acc {rec.get('masked_lm_accuracy', 0):.3f}"
            f"  NSP acc {rec.get('next_sentence_accuracy', 0):.3f}  {rec.get('tokens_per_s') or 0:.0f} tok/s"
            f"  {rec['elapsed_s']:.0f} s"
        )

    t0 = time.perf_counter()
    res = pretrain(cfg, callbacks=[show])
    timings["pretrain_s"] = round(time.perf_counter() - t0, 2)
    rows = [json.loads(ln) for ln in (out / "run" / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    evals = [json.loads(ln) for ln in (out / "run" / "eval.jsonl").read_text().splitlines() if ln.strip()]
    print("      MLM accuracy by step (train):")
    for r in rows[:: max(len(rows) // 8, 1)] + (
        [rows[-1]] if len(rows) % max(len(rows) // 8, 1) != 1 else []
    ):
        bar = "#" * int(round(40 * r.get("masked_lm_accuracy", 0)))
        print(f"      {r['step']:5d} {r.get('masked_lm_accuracy', 0):.3f} {bar}")
    for e in evals:
        print(
            f"      eval @ {e['step']:5d}: MLM acc {e.get('masked_lm_accuracy', float('nan')):.3f}  "
            f"NSP acc {e.get('next_sentence_accuracy', float('nan')):.3f}  loss {e['loss']:.3f}"
        )

    print("[4/4] fill-mask with the pre-trained model", flush=True)
    from bertkit.heads.pretraining import BertForMaskedLM, fill_mask
    from bertkit.tokenizer import Tokenizer

    model_dir = Path(res["model_dir"])
    mlm = BertForMaskedLM.from_pretrained(model_dir)
    tok = Tokenizer.from_pretrained(model_dir) if hasattr(Tokenizer, "from_pretrained") else None
    if tok is None:
        tok = Tokenizer(str(model_dir / "vocab.txt"))
    predictions = []
    for text in probes:
        preds = fill_mask(mlm, tok, text, top_k=5)
        if not preds:
            continue
        tops = ", ".join(f"{p['token']} ({p['score']:.2f})" for p in preds[0])
        print(f"      {text}\n        -> {tops}")
        predictions.append({"text": text, "predictions": preds[0]})

    timings["total_s"] = round(time.perf_counter() - t_start, 2)
    first, last = rows[0], rows[-1]
    report = {
        "corpus": corpus_info,
        "data": data_info,
        "model": {"preset": args.preset, **overrides, "dir": str(model_dir)},
        "train": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "max_seq_length": args.max_seq_length,
            "first": first,
            "last": last,
            "masked_lm_accuracy_rise": round(
                last.get("masked_lm_accuracy", 0) - first.get("masked_lm_accuracy", 0), 4
            ),
        },
        "eval": evals,
        "fill_mask": predictions,
        "timings": timings,
        "files": {
            "metrics": str(out / "run" / "metrics.jsonl"),
            "curves_png": str(out / "run" / "curves.png"),
        },
    }
    atomic_write_json(out / "report.json", report)
    try:
        import shutil

        shutil.copyfile(out / "run" / "curves.png", out / "curves.png")
    except OSError:
        pass
    print(
        f"done in {timings['total_s']:.0f} s: MLM accuracy {first.get('masked_lm_accuracy', 0):.3f} -> "
        f"{last.get('masked_lm_accuracy', 0):.3f}; report {out / 'report.json'}, curves {out / 'curves.png'}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
