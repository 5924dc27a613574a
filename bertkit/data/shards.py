"""Binary token shards: ``bertkit prepare`` writes them, :class:`ShardSet` memory-maps them back.

Layout of ``DATA_DIR``::

    manifest.json            counts, vocab sha256, per-shard file sha256s, options, the tokenizer's kind
    vocab.txt                copy of the vocabulary the ids refer to (WordPiece), or
    tokenizer.json           copy of the byte-level BPE tokenizer they come from (``bertkit vocab --kind bpe``)
    shard_00000.ids.npy      token ids, flat (uint16 when the vocab has < 65536 entries, else int32)
    shard_00000.sents.npy    int64 [n_sentences + 1]: sentence k is ids[sents[k]:sents[k+1]]
    shard_00000.docs.npy     int64 [n_documents + 1]: document d is sentences docs[d]:docs[d+1]
    shard_00000.json         the shard's own record (written last: its presence means "finished")

The corpus is streamed (compressed files too, see :mod:`bertkit.data.corpus`): the main process groups documents into shards of about ``shard_size_mb`` of text
and hands them to ``workers`` processes (at most ``2 * workers`` shards in flight, so memory is bounded by
the shard size, not the corpus size), or, with ``cluster``, to the workers of a Dask cluster
(:mod:`bertkit.data.cluster`). A shard whose record matches the text it would be built from (sha256),
the vocabulary and the options, and whose files still match their checksums, is skipped, so re-running after an interruption only does the rest.
Loading checks every file's size and structure (``verify=True`` also its sha256) and raises
:class:`bertkit.errors.UserError` naming the broken file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing as mp
import os
import shutil
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bertkit.data.corpus import CorpusStats, byte_progress, expand_paths, iter_documents
from bertkit.data.shard_build import (
    _ARRAYS,
    _WORKER,
    FORMAT_VERSION,
    ChunkCache,
    _bpe_lowercases,
    _build_shard,
    _shard_name,
    load_tokenizer,
    resolve_vocab,
    sha256_file,
    vocab_name,
    vocab_tokens,
)
from bertkit.errors import UserError
from bertkit.io import atomic_write, atomic_write_json, path_inside
from bertkit.workers import clamp_workers, die_with_parent

__all__ = ["prepare", "ShardSet"]


# --- writing -----------------------------------------------------------------------------------------


def _init_worker(vocab_file: str, lowercase: bool, parent: int) -> None:
    die_with_parent(parent)
    # one tokenizer thread per worker process: the processes are the parallelism
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # A forked worker inherits the parent's tokenizer (building one costs ~0.1-0.2 s per worker, on the
    # critical path of a small corpus) and the chunk cache it warmed with it; a spawned one builds its own.
    inherited = _WORKER.pop("inherited", None)
    cache = _WORKER.pop("inherited_cache", None)
    _WORKER["tok"] = inherited or load_tokenizer(vocab_file, lowercase)
    _WORKER["cache"] = cache if inherited is not None and cache is not None else ChunkCache()


def _warm_cache(tokenizer, task: tuple) -> ChunkCache | None:
    """A chunk cache holding the distinct words of the first shard's documents, for forked workers to share.

    Why: each worker starts with an empty cache, so every worker tokenized again the words that all shards
    share (most of a shard's distinct words: 0.1-0.2 s of CPU per worker on a 4 MB shard). The parent
    tokenizes them once before the workers are forked, with the Rust library's thread pool off, so that no
    thread pool is copied into the children (the library warns and turns it off there)."""
    if task[5].get("tokenizer") == "bpe":  # BPE shards are encoded as running text, not by cached words
        return None
    words = list(dict.fromkeys(" ".join(s for doc in task[1] for s in doc).split(" ")))  # distinct
    cache = ChunkCache()
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        cache.numbers(tokenizer, words)
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    return cache


def _group_documents(
    docs: Iterable[list[str]], shard_bytes: int
) -> Iterator[tuple[list[list[str]], str, int]]:
    """Groups of documents of about ``shard_bytes`` of text, with the sha256 of their text and byte size."""
    group: list[list[str]] = []
    h = hashlib.sha256()
    size = 0
    for doc in docs:
        group.append(doc)
        b = ("\n".join(doc) + "\n\n").encode("utf-8")
        h.update(b)
        size += len(b)
        if size >= shard_bytes:
            yield group, h.hexdigest(), size
            group, h, size = [], hashlib.sha256(), 0
    if group:
        yield group, h.hexdigest(), size


def _finished_record(out_dir: Path, index: int, text_sha: str, options: dict) -> dict | None:
    rec_path = out_dir / f"{_shard_name(index)}.json"
    if not rec_path.is_file():
        return None
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
        if rec.get("text_sha256") != text_sha or rec.get("options") != options:
            return None
        for key in _ARRAYS:
            p = out_dir / f"{rec['name']}.{key}.npy"
            info = rec["files"][key]
            if not p.is_file() or p.stat().st_size != info["bytes"] or sha256_file(p) != info["sha256"]:
                return None
    except (ValueError, KeyError, OSError):
        return None
    return rec


def _prepare_in_pool(
    tasks: Iterator[tuple], workers: int, vocab_file: Path, lowercase: bool, tokenizer, records: list, bar
) -> None:
    """Build shards in ``workers`` processes, at most ``2 * workers`` in flight, appending to ``records``.

    A ``concurrent.futures`` pool rather than ``multiprocessing.Pool``: when a shard fails, ``Pool.terminate``
    with tasks still queued can deadlock (its task-handler thread waits forever on the queue's lock; we saw
    it hang CI), whereas an executor cancels what has not started and waits for what has.
    """
    ctx = mp.get_context("spawn" if os.name == "nt" else "fork")
    first = next(tasks, None)
    if first is None:
        return
    pool = ProcessPoolExecutor(
        workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(str(vocab_file), lowercase, os.getpid()),
    )
    try:
        # forked workers pick these up in _init_worker (the pool forks them at its first submit)
        _WORKER["inherited"] = tokenizer
        _WORKER["inherited_cache"] = _warm_cache(tokenizer, first[0])
        pending: deque = deque()
        for task, size in itertools.chain([first], tasks):
            pending.append((pool.submit(_build_shard, task), size))
            while len(pending) >= 2 * workers:  # bounded: memory ~ shard size x in-flight shards
                future, sz = pending.popleft()
                records.append(future.result())
                bar.update(sz)
        while pending:
            future, sz = pending.popleft()
            records.append(future.result())
            bar.update(sz)
    finally:  # also when a worker failed: cancel what is queued, and the parent must not keep the hand-over
        pool.shutdown(wait=True, cancel_futures=True)
        _WORKER.pop("inherited", None)
        _WORKER.pop("inherited_cache", None)


def _copy_vocab(vocab_file: Path, out_dir: Path) -> None:
    """``out_dir/vocab.txt`` (or ``tokenizer.json``) = ``vocab_file`` (nothing to do when it is that file)."""
    name = vocab_name(resolve_vocab(vocab_file)[1])
    if out_dir.resolve() != vocab_file.parent.resolve() or vocab_file.name != name:
        with atomic_write(out_dir / name, "wb") as f, open(vocab_file, "rb") as src:
            shutil.copyfileobj(src, f)


def prepare(
    corpus: Iterable[str | os.PathLike],
    vocab_file: str | os.PathLike,
    out_dir: str | os.PathLike,
    max_seq_length: int = 128,
    workers: int = 1,
    lowercase: bool = True,
    fmt: str = "auto",
    on_error: str = "raise",
    shard_size_mb: float = 4.0,
    progress: bool = True,
    cluster: str | None = None,
    cluster_timeout: float = 30.0,
) -> dict:
    """Tokenize a corpus into shards under ``out_dir``; returns the manifest (plus run statistics).

    ``cluster`` builds the shards on a Dask cluster instead of ``workers`` local processes: a scheduler's
    address, or ``local:N`` for N local worker processes (see :mod:`bertkit.data.cluster`)."""
    t0 = time.perf_counter()
    corpus = list(corpus)
    vocab_file, kind = resolve_vocab(vocab_file)
    out_dir = Path(out_dir)
    words = vocab_tokens(vocab_file)
    tokenizer = load_tokenizer(vocab_file, lowercase)  # fail early (in this process) on a bad vocabulary
    if kind == "bpe":  # the file's normaliser decides, whatever --cased says
        lowercase = _bpe_lowercases(vocab_file)
    vocab_sha = sha256_file(vocab_file)
    dtype = "uint16" if len(words) < 65536 else "int32"
    options = {
        "vocab_sha256": vocab_sha,
        "lowercase": bool(lowercase),
        "dtype": dtype,
        "version": FORMAT_VERSION,
        **({"tokenizer": "bpe"} if kind == "bpe" else {}),  # WordPiece shards' records stay as they were
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = CorpusStats()
    shard_bytes = max(1, int(shard_size_mb * 2**20))
    groups = _group_documents(iter_documents(corpus, fmt, on_error=on_error, stats=stats), shard_bytes)
    records: list[dict] = []
    skipped = 0
    total_bytes = sum(p.stat().st_size for p in expand_paths(corpus))  # for the ETA
    max_shards = -(-total_bytes // shard_bytes)
    if workers > 1 and cluster is None:  # the pool starts every worker at once: no more than can help
        workers = clamp_workers(workers, max_shards)
    bar = byte_progress(total_bytes, "prepare", progress)

    def tasks() -> Iterator[tuple]:
        nonlocal skipped
        read = 0
        for index, (docs, text_sha, _) in enumerate(groups):
            # stored (compressed) bytes read for this group: sums to the total the bar counts to
            size, read = stats.input_bytes - read, stats.input_bytes
            rec = _finished_record(out_dir, index, text_sha, options)
            if rec is not None:
                skipped += 1
                records.append(rec)
                bar.update(size)
                continue
            yield (index, docs, text_sha, str(out_dir), dtype, options), size

    try:
        if cluster is not None:
            from bertkit.data.cluster import build_on_cluster, connect

            with connect(cluster, cluster_timeout, max_workers=max_shards) as client:
                _copy_vocab(vocab_file, out_dir)  # the workers load it there (see bertkit.data.cluster)
                build_on_cluster(client, tasks(), lowercase, records, bar)
        elif workers <= 1:
            _WORKER.update(tok=tokenizer, cache=ChunkCache())
            for task, size in tasks():
                records.append(_build_shard(task))
                bar.update(size)
        else:
            _prepare_in_pool(tasks(), workers, vocab_file, lowercase, tokenizer, records, bar)
    finally:  # also on an error: the bar's line must not be left half-drawn under the message
        bar.close()
    if not records:
        raise UserError(
            f"no text found in {', '.join(map(str, corpus))} (format {fmt!r}); check --corpus and --format"
        )
    records.sort(key=lambda r: r["index"])
    # Shards beyond the corpus's current end (it shrank since a previous run) are stale: remove them.
    n = len(records)
    for p in out_dir.glob("shard_*.json"):
        try:
            stale = int(p.name[6:11]) >= n
        except ValueError:
            continue
        if stale:
            for key in _ARRAYS:
                (out_dir / f"{p.stem}.{key}.npy").unlink(missing_ok=True)
            p.unlink()
    if cluster is None:
        _copy_vocab(vocab_file, out_dir)
    manifest = {
        "format": "bertkit-shards",
        "version": FORMAT_VERSION,
        "vocab_file": vocab_name(kind),
        "tokenizer": kind,
        "vocab_sha256": vocab_sha,
        "vocab_size": len(words),
        "lowercase": bool(lowercase),
        "dtype": dtype,
        "max_seq_length": max_seq_length,
        "corpus": [str(p) for p in corpus],
        "corpus_format": fmt,
        "documents": sum(r["documents"] for r in records),
        "sentences": sum(r["sentences"] for r in records),
        "tokens": sum(r["tokens"] for r in records),
        "text_bytes": stats.bytes,
        "skipped_lines": stats.skipped_lines,
        "shards": [
            {k: r[k] for k in ("name", "documents", "sentences", "tokens", "files", "text_sha256")}
            for r in records
        ],
    }
    atomic_write_json(out_dir / "manifest.json", manifest)
    seconds = time.perf_counter() - t0
    return {
        **{k: v for k, v in manifest.items() if k != "shards"},
        "out": str(out_dir),
        "num_shards": len(records),
        "shards_skipped": skipped,
        "shards_written": len(records) - skipped,
        "skipped": stats.skipped,
        "seconds": round(seconds, 3),
        "mb_per_s": round(stats.bytes / 2**20 / max(seconds, 1e-9), 3),
        **({"cluster": cluster} if cluster is not None else {}),
    }


# --- reading -----------------------------------------------------------------------------------------


class ShardSet:
    """Memory-mapped shards of a ``prepare`` output directory.

    ``documents`` (count), ``document(d) -> list[np.ndarray]`` (its sentences' ids), and flat per-document
    index arrays (``doc_shard``, ``doc_sent_lo``, ``doc_sent_hi``) for vectorised samplers. The memmaps are
    opened lazily in each process (pickling a ShardSet sends only paths), so DataLoader workers share pages.
    """

    def __init__(self, data_dir: str | os.PathLike, verify: bool = False):
        self.data_dir = Path(data_dir)
        mpath = self.data_dir / "manifest.json"
        if not mpath.is_file():
            raise UserError(f"{mpath}: not found; create the data directory with `bertkit prepare`")
        try:
            self.manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except ValueError as e:
            raise UserError(f"{mpath}: corrupted manifest ({e}); re-run `bertkit prepare`") from None
        if (
            not isinstance(self.manifest, dict)
            or self.manifest.get("format") != "bertkit-shards"
            or self.manifest.get("version") != FORMAT_VERSION
        ):
            raise UserError(
                f"{mpath}: not a bertkit shard manifest of version {FORMAT_VERSION}; re-run `bertkit prepare`"
            )
        self.vocab_file = path_inside(self.data_dir, self.manifest.get("vocab_file"), str(mpath))
        self.vocab_size = int(self.manifest["vocab_size"])
        self.lowercase = bool(self.manifest.get("lowercase", True))
        self._arrays: list[dict[str, np.ndarray]] | None = None
        arrays = self._open(verify)
        lo, hi, shard = [], [], []
        for k, arr in enumerate(arrays):
            docs = np.asarray(arr["docs"])
            lo.append(docs[:-1])
            hi.append(docs[1:])
            shard.append(np.full(len(docs) - 1, k, dtype=np.int32))
        self.doc_shard = np.concatenate(shard) if shard else np.zeros(0, np.int32)
        self.doc_sent_lo = np.concatenate(lo) if lo else np.zeros(0, np.int64)
        self.doc_sent_hi = np.concatenate(hi) if hi else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.doc_shard)

    @property
    def documents(self) -> int:
        return len(self.doc_shard)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_arrays"] = None
        return state

    @property
    def arrays(self) -> list[dict[str, np.ndarray]]:
        if self._arrays is None:
            self._open(False)
        return self._arrays

    def _open(self, verify: bool) -> list[dict[str, np.ndarray]]:
        fix = "delete it and re-run `bertkit prepare` with the same arguments to rebuild it"
        arrays = []
        for rec in self.manifest["shards"]:
            shard = {}
            for key in _ARRAYS:
                path = path_inside(
                    self.data_dir, f"{rec['name']}.{key}.npy", str(self.data_dir / "manifest.json")
                )
                info = rec["files"][key]
                if not path.is_file():
                    raise UserError(
                        f"{path}: shard file missing; re-run `bertkit prepare` with the same arguments"
                    )
                size = path.stat().st_size
                if size != info["bytes"]:
                    raise UserError(
                        f"{path}: truncated or corrupted shard ({size} bytes, manifest says {info['bytes']}); {fix}"
                    )
                if verify and sha256_file(path) != info["sha256"]:
                    raise UserError(f"{path}: corrupted shard (sha256 differs from manifest.json); {fix}")
                try:
                    # A plain ndarray view of the memmap: slicing it skips np.memmap's per-slice overhead.
                    shard[key] = np.load(path, mmap_mode="r").view(np.ndarray)
                except (ValueError, OSError, EOFError) as e:
                    raise UserError(f"{path}: corrupted shard ({e}); {fix}") from None
            ids, sents, docs = shard["ids"], shard["sents"], shard["docs"]
            ok = (
                ids.ndim == 1
                and ids.size == rec["tokens"]
                and sents.shape == (rec["sentences"] + 1,)
                and docs.shape == (rec["documents"] + 1,)
                and (sents.size == 0 or int(sents[-1]) == ids.size)
                and (docs.size == 0 or int(docs[-1]) == rec["sentences"])
            )
            if not ok:
                raise UserError(f"{self.data_dir / rec['name']}.*.npy: inconsistent shard arrays; {fix}")
            arrays.append(shard)
        self._arrays = arrays
        return arrays

    def document(self, d: int) -> list[np.ndarray]:
        """Document ``d``'s sentences as arrays of token ids."""
        arr = self.arrays[int(self.doc_shard[d])]
        sents = arr["sents"]
        ids = arr["ids"]
        lo, hi = int(self.doc_sent_lo[d]), int(self.doc_sent_hi[d])
        bounds = np.asarray(sents[lo : hi + 1])
        return [ids[bounds[k] : bounds[k + 1]] for k in range(hi - lo)]

    def iter_documents(self) -> Iterator[list[np.ndarray]]:
        for d in range(self.documents):
            yield self.document(d)

    def vocab_words(self) -> list[str]:
        return vocab_tokens(self.vocab_file)
