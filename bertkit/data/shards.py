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
import io
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

from bertkit.data.corpus import CorpusStats, expand_paths, iter_documents
from bertkit.errors import UserError
from bertkit.io import atomic_write, atomic_write_json, path_inside, read_text
from bertkit.workers import clamp_workers, die_with_parent

__all__ = [
    "prepare",
    "ShardSet",
    "load_tokenizer",
    "resolve_vocab",
    "vocab_tokens",
    "encode_sentences",
    "ChunkCache",
    "encode_chunks",
    "sha256_file",
    "FORMAT_VERSION",
]

FORMAT_VERSION = 1
_ARRAYS = ("ids", "sents", "docs")


def sha256_file(path: str | os.PathLike, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


def resolve_vocab(path: str | os.PathLike) -> tuple[Path, str]:
    """The vocabulary file ``path`` names and its kind, ``"wordpiece"`` or ``"bpe"``: a ``.json`` file is a
    BPE ``tokenizer.json``; a folder gives its ``vocab.txt`` (a BERT folder holds both), else its
    ``tokenizer.json``; any other file is a WordPiece ``vocab.txt``."""
    path = Path(path)
    if path.is_dir():
        if (path / "vocab.txt").is_file():
            return path / "vocab.txt", "wordpiece"
        if (path / "tokenizer.json").is_file():
            return path / "tokenizer.json", "bpe"
        raise UserError(f"{path}: no vocab.txt or tokenizer.json in this folder")
    return path, "bpe" if path.suffix.lower() == ".json" else "wordpiece"


def load_tokenizer(vocab_file: str | os.PathLike, lowercase: bool = True):
    """The project's :class:`bertkit.tokenizer.Tokenizer` for ``vocab_file`` (see :func:`resolve_vocab`);
    ``lowercase`` applies to a WordPiece vocabulary only: a tokenizer.json carries its own normaliser."""
    from bertkit.tokenizer import Tokenizer

    path, kind = resolve_vocab(vocab_file)
    if kind == "bpe":
        from bertkit.tokenizer_bpe import BPETokenizer

        _read_vocab(path)  # the model's kind and the special tokens, in one line each
        return BPETokenizer.from_file(path)
    return Tokenizer(str(path), lowercase=lowercase)


def vocab_tokens(vocab_file: str | os.PathLike) -> list[str]:
    """The tokens of a vocab.txt or BPE tokenizer.json (or a folder holding one) in id order; the five
    special tokens must be among them."""
    return _read_vocab(resolve_vocab(vocab_file)[0])


def _read_vocab(vocab_file: Path) -> list[str]:
    """The vocabulary's tokens in id order (the special tokens the data needs checked)."""
    if not vocab_file.is_file():
        raise UserError(f"{vocab_file}: vocabulary file not found (train one with `bertkit vocab`)")
    if resolve_vocab(vocab_file)[1] == "bpe":
        words = _bpe_tokens(vocab_file)
        fix = "train one with `bertkit vocab --kind bpe`"
    else:
        words = [line.rstrip("\r") for line in read_text(vocab_file, "vocabulary").split("\n")]
        while words and not words[-1]:
            words.pop()
        fix = "use a BERT vocab.txt"
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in set(words)]
    if missing:
        raise UserError(f"{vocab_file}: vocabulary lacks {' '.join(missing)}; {fix}")
    return words


def _bpe_tokens(path: Path) -> list[str]:
    """The tokens of a BPE ``tokenizer.json`` (its added tokens included) in id order."""
    try:
        data = json.loads(read_text(path, "tokenizer file"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    model = data.get("model") if isinstance(data, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "BPE" or not isinstance(model.get("vocab"), dict):
        raise UserError(
            f"{path}: model type {kind!r}, not a BPE tokenizer.json; give a WordPiece vocabulary as its vocab.txt"
        )
    by_id = {i: t for t, i in model["vocab"].items() if isinstance(i, int)}
    for added in data.get("added_tokens") or []:
        if (
            isinstance(added, dict)
            and isinstance(added.get("id"), int)
            and isinstance(added.get("content"), str)
        ):
            by_id[added["id"]] = added["content"]
    if sorted(by_id) != list(range(len(by_id))):
        raise UserError(f"{path}: token ids are not 0..{len(by_id) - 1} without gaps")
    return [by_id[i] for i in range(len(by_id))]


def _bpe_lowercases(path: Path) -> bool:
    """Whether a tokenizer.json's normaliser lower-cases (a ``Lowercase`` step, or BERT's with lowercase)."""

    def walk(node: object) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "Lowercase" or (
                node.get("type") == "BertNormalizer" and node.get("lowercase")
            ):
                return True
            return any(walk(v) for v in node.values())
        return isinstance(node, list) and any(walk(v) for v in node)

    return walk(json.loads(read_text(path, "tokenizer file")).get("normalizer"))


# --- writing -----------------------------------------------------------------------------------------

_WORKER: dict = {}


def _init_worker(vocab_file: str, lowercase: bool, pooled: bool = False, parent: int | None = None) -> None:
    if parent is not None:
        die_with_parent(parent)
    if pooled:  # one tokenizer thread per worker process: the processes are the parallelism
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # A forked worker inherits the parent's tokenizer (building one costs ~0.1-0.2 s per worker, on the
    # critical path of a small corpus); a spawned one builds its own.
    _WORKER["tok"] = _WORKER.pop("inherited", None) or load_tokenizer(vocab_file, lowercase)
    _WORKER["cache"] = ChunkCache()  # valid for this tokenizer only


def _shard_name(index: int) -> str:
    return f"shard_{index:05d}"


class ChunkCache:
    """Token ids of distinct space-separated chunks, as one flat table (``ids[off[k]:off[k + 1]]`` for chunk
    number ``k``) so that whole sentences are assembled with a numpy gather. Reset when it grows past ``limit``."""

    def __init__(self, limit: int = 500_000):
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        self.index: dict[str, int] = {}
        self.ids = np.zeros(0, dtype=np.int64)
        self.off = np.zeros(1, dtype=np.int64)

    def add(self, tok, chunks: list[str]) -> None:
        flat, lengths = encode_chunks(tok, chunks)
        n = len(self.index)
        self.index.update(zip(chunks, range(n, n + len(chunks))))
        self.ids = np.concatenate((self.ids, flat))
        self.off = np.concatenate((self.off, self.off[-1] + np.cumsum(lengths)))


def encode_chunks(tok, chunks: list[str], block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of space-free ``chunks``: flat int64 ids [n_tokens] and int64 lengths [len(chunks)], exactly
    as ``tok.encode_batch_ids(chunks)`` would give them.

    Why not one encoding per chunk: the Rust tokenizer's fixed cost per encoding (~6 us) dominates for single
    words. Instead ``block`` chunks are joined with spaces into one text (no token spans a space), encoded in
    one batch call (parallel over blocks), and each token is assigned to its chunk by its character offset.
    Measured on the 49k distinct Gutenberg words: 0.16 s instead of 0.38 s.
    """
    texts = [" ".join(chunks[i : i + block]) for i in range(0, len(chunks), block)]
    encodings = tok.encode_batch(texts, add_special_tokens=False) if texts else []
    flats, lens = [], []
    for k, enc in enumerate(encodings):
        words = chunks[k * block : (k + 1) * block]
        width = np.fromiter(map(len, words), dtype=np.int64, count=len(words)) + 1  # + the joining space
        starts = np.cumsum(width) - width  # character offset of each chunk in the joined text
        ids = np.array(enc.ids, dtype=np.int64)
        if ids.size:
            tok_start = np.array(enc.offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
            owner = np.searchsorted(starts, tok_start, side="right") - 1
            lens.append(np.bincount(owner, minlength=len(words)))
        else:
            lens.append(np.zeros(len(words), dtype=np.int64))
        flats.append(ids)
    if not flats:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(flats), np.concatenate(lens)


def encode_sentences(tok, sentences: list[str], dtype="int32", cache: ChunkCache | None = None):
    """Token ids of ``sentences`` (flat array) and each sentence's length, exactly as
    ``tok.encode_batch_ids(sentences)``, but each distinct space-separated chunk is tokenized once and cached.

    BERT's normalisation and pre-tokenisation never join text across an ASCII space, so a sentence's ids are
    the concatenation of its chunks' ids; natural text repeats its words, so most chunks are cache hits.
    """
    if not sentences:
        return np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.int64)
    cache = ChunkCache() if cache is None else cache
    words = " ".join(sentences).split(" ")
    missing = list(set(words).difference(cache.index))
    if len(cache.index) + len(missing) > cache.limit:
        cache.clear()
        missing = list(set(words))
    if missing:
        cache.add(tok, missing)
    wid = np.fromiter(map(cache.index.__getitem__, words), dtype=np.int64, count=len(words))
    starts = cache.off[wid]
    word_len = cache.off[wid + 1] - starts
    tok_end = np.cumsum(word_len)
    total = int(tok_end[-1]) if len(tok_end) else 0
    gather = np.repeat(starts - (tok_end - word_len), word_len) + np.arange(total)
    flat = cache.ids[gather].astype(dtype, copy=False)
    n_words = np.fromiter((s.count(" ") + 1 for s in sentences), dtype=np.int64, count=len(sentences))
    ends = tok_end[np.cumsum(n_words) - 1]
    lengths = np.diff(ends, prepend=0)
    return flat, lengths


def running_text(docs: list[list[str]]) -> list[str]:
    """The documents' sentences as they read in running text: each after a space but a document's first."""
    return [s if k == 0 or not s else " " + s for doc in docs for k, s in enumerate(doc)]


def _encode_running(tok, docs: list[list[str]], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of the documents' sentences (flat) and each one's length, for a byte-level BPE tokenizer.

    Its tokens carry the space before a word (``" word"``): a sentence that follows another starts with the
    spaced token, as in the text the model will read, not the form a text's very first word takes. And not
    by cached space-separated chunks as :func:`encode_sentences`, since a word's ids depend on what precedes
    it."""
    sentences = running_text(docs)
    per = tok.encode_batch_ids(sentences) if sentences else []
    lengths = np.fromiter(map(len, per), dtype=np.int64, count=len(per))
    flat = np.fromiter((i for ids in per for i in ids), dtype=np.int64, count=int(lengths.sum()))
    return flat.astype(dtype, copy=False), lengths


def _build_shard(task: tuple, tok=None, cache: ChunkCache | None = None) -> dict:
    """Tokenize one group of documents and write its arrays + record (runs in a worker; ``tok`` and ``cache``
    default to the worker's own)."""
    index, docs, text_sha, out_dir, dtype, options = task
    sentences = [s for doc in docs for s in doc]
    tok = _WORKER["tok"] if tok is None else tok
    cache = _WORKER["cache"] if cache is None else cache
    if options.get("tokenizer") == "bpe":
        ids, lengths = _encode_running(tok, docs, dtype)
    else:
        ids, lengths = encode_sentences(tok, sentences, dtype, cache)
    # Drop sentences that tokenize to nothing, then documents left empty.
    doc_sizes = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    doc_of_sent = np.repeat(np.arange(len(docs)), doc_sizes)
    keep = lengths > 0
    kept_per_doc = np.bincount(doc_of_sent[keep], minlength=len(docs))
    kept_per_doc = kept_per_doc[kept_per_doc > 0]
    sents = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(lengths[keep], out=sents[1:])
    docs_arr = np.zeros(len(kept_per_doc) + 1, dtype=np.int64)
    np.cumsum(kept_per_doc, out=docs_arr[1:])
    out_dir = Path(out_dir)
    name = _shard_name(index)
    record = {
        "name": name,
        "index": index,
        "documents": len(kept_per_doc),
        "sentences": int(keep.sum()),
        "tokens": int(ids.size),
        "text_sha256": text_sha,
        "options": options,
        "files": {},
    }
    for key, arr in zip(_ARRAYS, (ids, sents, docs_arr)):
        record["files"][key] = _write_array(out_dir / f"{name}.{key}.npy", arr)
    atomic_write_json(out_dir / f"{name}.json", record)
    return record


def _write_array(path: Path, arr: np.ndarray) -> dict:
    """Write ``arr`` as ``.npy`` atomically; returns its sha256 and size, hashed from memory.

    Not fsynced, unlike the shard's record, which is written after it and holds these checksums: a resumed
    run re-checks them, so a file lost in a crash is rebuilt, and 6 fsyncs per shard are saved."""
    buf = io.BytesIO()
    np.save(buf, arr)
    data = buf.getbuffer()
    with atomic_write(path, "wb", fsync=False) as f:
        f.write(data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


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
    _WORKER["inherited"] = tokenizer  # (forked workers pick it up in _init_worker)
    pool = ProcessPoolExecutor(
        workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(str(vocab_file), lowercase, True, os.getpid()),
    )
    try:
        pending: deque = deque()
        for task, size in tasks:
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


def vocab_name(kind: str) -> str:
    """The name a data directory gives its copy of a ``kind`` vocabulary."""
    return "tokenizer.json" if kind == "bpe" else "vocab.txt"


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
    from tqdm import tqdm

    t0 = time.perf_counter()
    corpus = list(corpus)
    vocab_file, kind = resolve_vocab(vocab_file)
    out_dir = Path(out_dir)
    words = _read_vocab(vocab_file)
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
    groups = _group_documents(
        iter_documents(corpus, fmt, on_error=on_error, stats=stats), max(1, int(shard_size_mb * 2**20))
    )
    records: list[dict] = []
    skipped = 0
    total_bytes = sum(p.stat().st_size for p in expand_paths(corpus))  # for the ETA
    max_shards = -(-total_bytes // max(1, int(shard_size_mb * 2**20)))
    if workers > 1 and cluster is None:  # the pool starts every worker at once: no more than can help
        workers = clamp_workers(workers, max_shards)
    bar = tqdm(
        total=total_bytes, unit="B", unit_scale=True, desc="prepare", disable=not progress, smoothing=0.1
    )

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
        return _read_vocab(self.vocab_file)
