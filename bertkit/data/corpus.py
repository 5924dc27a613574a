"""Corpus reading: documents (lists of sentence strings), streamed, never the whole corpus in memory.

Formats (``fmt``):

- ``"lines"`` - the original release's format: one sentence per line, a blank line between documents
  (a file's end also ends its last document).
- ``"paragraphs"`` - one paragraph per line, a blank line between documents (the large corpus's layout);
  each paragraph is split into sentences by :func:`split_sentences`, so that a pre-training segment can end
  between sentences, as the original's sentence-per-line input allows.
- ``"file"`` - one document per file, one sentence per line (blank lines are ignored).
- ``"prose"`` - one document per file of running text: paragraphs (separated by blank lines, or one per
  line) are split into sentences by :func:`split_sentences`, a rule-based splitter that needs no download.
- ``"jsonl"`` - one JSON object per line, its ``text`` field (``text_field``) a document of prose.
- ``"auto"`` - ``.jsonl``/``.json`` files are ``jsonl``, everything else ``lines``.

Files ending in ``.gz``, ``.xz`` or ``.bz2`` are decompressed as they are read (the format is judged by the
name without that suffix); the text read is the same as from the decompressed file, and a corrupt or truncated
one raises :class:`bertkit.errors.UserError` naming it. Directories are expanded to the files under them
(recursively, sorted, hidden files skipped). Empty documents are dropped. Undecodable bytes or a malformed JSONL line raise :class:`bertkit.errors.UserError` naming the
file and line, unless ``on_error="skip"``, which skips the line and counts it in :class:`CorpusStats`.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import UserError

__all__ = [
    "FORMATS",
    "COMPRESSIONS",
    "CorpusStats",
    "describe_files",
    "expand_paths",
    "iter_documents",
    "split_sentences",
    "read_documents",
]

FORMATS = ("auto", "lines", "paragraphs", "file", "prose", "jsonl")
# suffix -> (name, stream class): each reads a compressed file object in blocks, never the whole file
COMPRESSIONS = {
    ".gz": ("gzip", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    ".xz": ("xz", lzma.LZMAFile),
    ".bz2": ("bzip2", bz2.BZ2File),
}
# what the decompressors raise on a corrupt or truncated stream (BadGzipFile is an OSError)
_STREAM_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)


@dataclass
class CorpusStats:
    """Counts gathered while reading (``skipped`` lists the first few skipped places)."""

    files: int = 0
    documents: int = 0
    sentences: int = 0
    bytes: int = 0  # text bytes (decompressed)
    input_bytes: int = 0  # bytes of the files as stored (compressed ones: compressed bytes), for progress
    skipped_lines: int = 0
    skipped: list[str] = field(default_factory=list)

    def skip(self, where: str) -> None:
        self.skipped_lines += 1
        if len(self.skipped) < 20:
            self.skipped.append(where)


def expand_paths(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files named, and the files under directories named (sorted); a missing path is a UserError."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(
                f
                for f in p.rglob("*")
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
            if not files:
                raise UserError(f"{p}: directory has no files; pass text files or a directory of them")
            out.extend(files)
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"{p}: no such file or directory (check the --corpus path)")
    if not out:
        raise UserError("no corpus files given (pass --corpus PATH...)")
    return out


def byte_progress(total: int, desc: str, progress: bool = True):
    """A tqdm bar over ``total`` bytes of stored corpus files read, with an ETA (``progress=False``: silent)."""
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not progress, smoothing=0.1)


def describe_files(paths: Iterable[str | os.PathLike], files: list[Path], limit: int = 8) -> str:
    """One line saying which ``files`` (from :func:`expand_paths`) the ``paths`` named: their count, total size
    and the first ``limit`` names."""
    size = sum(f.stat().st_size for f in files)
    dirs = [Path(p) for p in paths if Path(p).is_dir()]
    base = dirs[0] if len(dirs) == 1 and all(dirs[0] in f.parents for f in files) else None
    names = [str(f.relative_to(base)) if base else str(f) for f in files]
    shown = ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
    where = f" under {base}" if base else ""
    return (
        f"corpus: {len(files)} file{'s' * (len(files) != 1)}{where} ({size / 1e6:.1f} MB as stored): {shown}"
    )


# --- rule-based sentence splitting -------------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al fig figs no nos vol vols pp ed eds gen col
    lt sgt capt cmdr rev hon gov pres sen rep jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co
    corp dept univ approx est ca viz""".split()
)
# A sentence end: terminal punctuation, optional closing quotes/brackets, whitespace, then a likely start.
_BOUNDARY = re.compile(r"""([.!?]+|\.\.\.|…)(["'”’)\]]*)(\s+)(?=["'“‘(\[]*[A-Z0-9À-Þ])""")


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences with rules: ``. ! ?`` (and closing quotes) followed by space and a
    capital or digit, except after common abbreviations (Mr., e.g., ...), single initials (J. Smith) and
    numbers like ``No. 5``. Newlines inside a paragraph count as spaces."""
    text = " ".join(text.split())
    if not text:
        return []
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        end = m.end(2)
        if m.group(1) == ".":
            # The word before the period decides: abbreviation or initial -> not a boundary.
            j = m.start(1)
            k = j
            while k > start and not text[k - 1].isspace():
                k -= 1
            word = text[k:j].lstrip("\"'“‘([").lower()
            if (
                word in _ABBREVIATIONS
                or (len(word) == 1 and word.isalpha())
                or re.fullmatch(r"(\w\.)+\w", word)
            ):
                continue
        sentence = text[start:end].strip()
        if sentence:
            out.append(sentence)
        start = m.end(3)
    last = text[start:].strip()
    if last:
        out.append(last)
    return out


# --- readers -----------------------------------------------------------------------------------------


def _raw_blocks(path: Path, stats: CorpusStats, block: int = 1 << 16) -> Iterator[list[bytes]]:
    """The file's lines as bytes, about ``block`` bytes of them at a time, decompressed if its name ends in a
    :data:`COMPRESSIONS` suffix; streamed (the decompressors work in blocks), with ``stats.input_bytes``
    following the stored bytes read.

    Why blocks: a generator step and a ``tell()`` per line cost more than the reading itself, and in
    ``prepare`` the reading runs in the one process that feeds every worker."""
    kind = COMPRESSIONS.get(path.suffix.lower())
    start = stats.input_bytes
    with open(path, "rb") as stored:
        f = kind[1](stored) if kind else stored
        while True:
            try:
                lines = f.readlines(block)
            except _STREAM_ERRORS as e:
                if kind is None:
                    raise
                raise UserError(
                    f"{path}: corrupt or truncated {kind[0]} file ({e}); check the file "
                    f"(e.g. `{kind[0]} -t`) or fetch it again"
                ) from None
            if not lines:
                break
            stats.input_bytes = start + stored.tell()
            yield lines
        stats.input_bytes = start + os.fstat(stored.fileno()).st_size  # all of it counts as read


def _decoded_blocks(
    path: Path, on_error: str, stats: CorpusStats
) -> Iterator[tuple[int, list[str], list[int] | None]]:
    """For each block of :func:`_raw_blocks`: the number of its first line, its lines' text (each with its
    line end), and the lines' numbers where a line was dropped, else None (they follow on). Bad UTF-8 raises
    or (``on_error="skip"``) drops the line."""
    lineno = 1
    for raw in _raw_blocks(path, stats):
        data = b"".join(raw)
        stats.bytes += len(data)
        numbers = None
        try:  # one decode per block: a newline byte never sits inside a multi-byte character
            text = data.decode("utf-8")
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
        except UnicodeDecodeError:
            numbers, lines = _decode_each(raw, lineno, path, on_error, stats)
        if lines and (numbers[0] if numbers else lineno) == 1 and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]
        yield lineno, lines, numbers
        lineno += len(raw)


def _decode_each(
    raw: list[bytes], lineno: int, path: Path, on_error: str, stats: CorpusStats
) -> tuple[list[int], list[str]]:
    """The block's lines decoded one by one (and their numbers), to name or skip the ones not in UTF-8."""
    numbers, lines = [], []
    for k, line in enumerate(raw, lineno):
        try:
            lines.append(line.decode("utf-8"))
            numbers.append(k)
        except UnicodeDecodeError as e:
            if on_error == "skip":
                stats.skip(f"{path}:{k}")
                continue
            raise UserError(
                f"{path}:{k}: not valid UTF-8 ({e.reason} at byte {e.start}); re-encode the file as UTF-8 "
                "or pass --on-error skip to skip such lines"
            ) from None
    return numbers, lines


def _decoded_lines(path: Path, on_error: str, stats: CorpusStats) -> Iterator[tuple[int, str]]:
    """(line number, text without newline) for each line; bad UTF-8 raises or is skipped."""
    for lineno, lines, numbers in _decoded_blocks(path, on_error, stats):
        for k, line in zip(numbers or range(lineno, lineno + len(lines)), lines):
            yield k, line.rstrip("\r\n")


def _read_lines_format(
    path: Path, on_error: str, stats: CorpusStats, split: bool = False
) -> Iterator[list[str]]:
    """Documents separated by blank lines; each line a sentence, or (``split``) a paragraph of sentences."""
    doc: list[str] = []
    for _, lines, _ in _decoded_blocks(path, on_error, stats):
        for line in lines:
            line = line.strip()  # (also the line end)
            if not line:
                if doc:
                    yield doc
                    doc = []
            elif split:
                doc.extend(split_sentences(line))
            else:
                doc.append(line)
    if doc:
        yield doc


def _read_file_format(path: Path, on_error: str, stats: CorpusStats) -> Iterator[list[str]]:
    """The whole file one document: its non-blank lines (the blocks of the "lines" format, joined)."""
    doc = [line for block in _read_lines_format(path, on_error, stats) for line in block]
    if doc:
        yield doc


def _read_prose_format(path: Path, on_error: str, stats: CorpusStats) -> Iterator[list[str]]:
    """The whole file one document: each paragraph (a block of the "lines" format) split into sentences."""
    doc = [s for para in _read_lines_format(path, on_error, stats) for s in split_sentences(" ".join(para))]
    if doc:
        yield doc


def _read_jsonl_format(path: Path, on_error: str, stats: CorpusStats, text_field: str) -> Iterator[list[str]]:
    for lineno, line in _decoded_lines(path, on_error, stats):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            text = obj[text_field]
            if not isinstance(text, str):
                raise ValueError(f"field {text_field!r} is {type(text).__name__}, not a string")
        except (ValueError, KeyError) as e:
            if on_error == "skip":
                stats.skip(f"{path}:{lineno}")
                continue
            what = f"missing field {text_field!r}" if isinstance(e, KeyError) else str(e)
            raise UserError(
                f"{path}:{lineno}: malformed JSONL line ({what}); each line must be an object with a "
                f"{text_field!r} string, or pass --on-error skip to skip bad lines"
            ) from None
        doc: list[str] = []
        for para in text.split("\n\n"):
            doc.extend(split_sentences(para))
        if doc:
            yield doc


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    if path.suffix.lower() in COMPRESSIONS:  # c.jsonl.gz is JSONL
        path = path.with_suffix("")
    return "jsonl" if path.suffix.lower() in (".jsonl", ".json") else "lines"


def iter_documents(
    paths: Iterable[str | os.PathLike],
    fmt: str = "auto",
    on_error: str = "raise",
    stats: CorpusStats | None = None,
    text_field: str = "text",
) -> Iterator[list[str]]:
    """Stream documents (each a list of sentence strings) from files/directories in reading order."""
    if fmt not in FORMATS:
        raise UserError(f"unknown corpus format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if on_error not in ("raise", "skip"):
        raise UserError(f"--on-error must be 'raise' or 'skip', not {on_error!r}")
    stats = stats if stats is not None else CorpusStats()
    for path in expand_paths(paths):
        stats.files += 1
        kind = _format_of(path, fmt)
        if kind in ("lines", "paragraphs"):
            docs = _read_lines_format(path, on_error, stats, split=kind == "paragraphs")
        elif kind == "file":
            docs = _read_file_format(path, on_error, stats)
        elif kind == "prose":
            docs = _read_prose_format(path, on_error, stats)
        else:
            docs = _read_jsonl_format(path, on_error, stats, text_field)
        for doc in docs:
            stats.documents += 1
            stats.sentences += len(doc)
            yield doc


def read_documents(paths: Iterable[str | os.PathLike], fmt: str = "auto", **kw) -> list[list[str]]:
    """All documents as a list (small corpora and tests; use :func:`iter_documents` for large ones)."""
    return list(iter_documents(paths, fmt, **kw))
