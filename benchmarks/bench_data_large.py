"""Benchmark: ``prepare --workers 2`` against the original release's create_pretraining_data.py on a slice of
the large corpus (../shared/data/corpus-large) that both can finish.

Run: ``BERT_ORIGINAL_DIR=/tmp/bert_orig PYTHONPATH=$PWD .venv/bin/python -m benchmarks.bench_data_large
[--mb 20] [--file books-00.txt.xz] [--workers 2] [--repeats 3]`` (how to get the original without adding it to
this repository: see :mod:`benchmarks.bench_data`). The JSON goes to
``docs/perf/corpus-large-vs-original.json``.

The slice: the first whole documents of one corpus-large file (default the first, ``books-00.txt.xz``) up to
``--mb`` MB of text, its paragraphs split into sentences by :func:`bertkit.data.split_sentences` (what
``prepare --format paragraphs`` does), written to a temporary file in the original's format (one sentence per
line, a blank line between documents); both sides read that file, and it is deleted afterwards. Rows, each
side a cold subprocess (:func:`benchmarks.bench_data._measure`), ``--repeats`` rounds alternating the order,
the median run standing for each side:

- ``default``: ``prepare --workers N`` + one epoch of dynamic instances collated into batches of 32, vs the
  original end to end (its tokenizer + ``create_training_instances`` with dupe_factor 1 + ids). Goal >= 10.
- ``static``: ``prepare --workers N`` + ``create_static_from_shards`` (dupe_factor 1, seed 12345) to .npz, vs
  the same reference; and whether the two sides' instances are the same: the sha256 of the original's
  features (:func:`benchmarks.bench_data.arrays_sha256`) of ours and of the original's instances.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .bench_data import ROOT
from .common import child_json
from .inputs import SHARED_DATA

JSON_OUT = ROOT / "docs" / "perf" / "corpus-large-vs-original.json"


def write_slice(src: Path, out: Path, mb: float) -> dict:
    """The first whole documents of ``src`` (one paragraph a line, blank lines between documents) up to ``mb``
    MB of text, as one sentence a line into ``out``; returns counts."""
    from bertkit.data import split_sentences

    limit = int(mb * 2**20)
    docs = written = 0
    opener = lzma.open if src.suffix == ".xz" else open
    with opener(src, "rt", encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        doc: list[str] = []
        for line in f:
            if line.strip():
                doc.extend(split_sentences(line))
                continue
            if doc:
                text = "\n".join(doc) + "\n\n"
                g.write(text)
                docs, written, doc = docs + 1, written + len(text.encode("utf-8")), []
                if written >= limit:
                    break
    return {"documents": docs, "bytes": written}


def _side(mode: str, corpus: Path, workers: int, max_seq_length: int) -> dict:
    args = ["-m", "benchmarks.bench_data", "--_measure", mode, "--_corpus", str(corpus)]
    args += ["--workers", str(workers), "--max-seq-length", str(max_seq_length)]
    if mode != "default":
        args += ["--_fingerprint", "--_static-workers", str(workers)]
    return child_json(args)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default="books-00.txt.xz", help="the corpus-large file the slice comes from")
    ap.add_argument("--mb", type=float, default=20.0, help="MB of text in the slice (whole documents)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=JSON_OUT)
    ap.add_argument("--notes", default="", help="appended to the JSON's notes (the machine's state)")
    a = ap.parse_args(argv)
    original = os.environ.get("BERT_ORIGINAL_DIR")
    src = SHARED_DATA / "corpus-large" / a.file
    if not original or not src.is_file():
        print(f"needs BERT_ORIGINAL_DIR (a checkout of google-research/bert) and {src}", file=sys.stderr)
        return 2
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    load_before = _load()
    sides = ("default", "static", "original")
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "slice.txt"
        sliced = write_slice(src, corpus, a.mb)
        for r in range(a.repeats):
            for side in sides if r % 2 == 0 else sides[::-1]:
                row = _side(side, corpus, a.workers, a.max_seq_length)
                runs[side].append(row | {"load_average_after": _load()})
                print(json.dumps({"side": side, **row}), file=sys.stderr, flush=True)
    med = {s: sorted(rs, key=lambda x: x["seconds"])[len(rs) // 2] for s, rs in runs.items()}
    mb = med["original"]["mb"]
    ref_mbps = mb / med["original"]["seconds"]
    rows = []
    for side, label in (
        ("default", "prepare + one epoch of dynamic instances"),
        ("static", "prepare + static"),
    ):
        mbps = mb / med[side]["seconds"]
        row = {
            "name": f"corpus-large slice: {label} (workers={a.workers}) vs the original",
            "ours_mb_per_s": round(mbps, 3),
            "reference_mb_per_s": round(ref_mbps, 3),
            "ratio": round(mbps / ref_mbps, 2),
            "seconds": med[side]["seconds"],
            "reference_seconds": med["original"]["seconds"],
            "all_seconds": [x["seconds"] for x in runs[side]],
            "reference_all_seconds": [x["seconds"] for x in runs["original"]],
            "peak_mb": med[side]["peak_mb"],
            "reference_peak_mb": med["original"]["peak_mb"],
            "goal": ">= 10" if side == "default" else None,
        }
        if side == "static":
            row["same_instances_as_original"] = {
                "instances": [med["static"]["instances"], med["original"]["instances"]],
                "arrays_sha256_equal": all(
                    x["arrays_sha256"] == med["original"]["arrays_sha256"] for x in runs["static"]
                ),
                "arrays_sha256": med["original"]["arrays_sha256"],
            }
        rows.append(row)
    doc = {
        "what": "prepare (workers=N) vs the original create_pretraining_data.py on a slice of corpus-large",
        "command": "BERT_ORIGINAL_DIR=/tmp/bert_orig python -m benchmarks.bench_data_large "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "slice": {"file": a.file, "mb": round(mb, 3), **sliced, "format": "one sentence a line"},
        "commit": head.stdout.strip(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": _load(),
        "max_seq_length": a.max_seq_length,
        "repeats": a.repeats,
        "notes": "each side a cold subprocess, rounds alternating the order, the median run counts; "
        "MB/s of the slice's text; peak_mb is sampled Pss_Anon of the process and its workers"
        + (f"; {a.notes}" if a.notes else ""),
        "rows": rows,
        "runs": runs,
    }
    from bertkit.io import atomic_write_json

    a.json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(a.json, doc)
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
