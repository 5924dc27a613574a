"""One shard from its text: the vocabulary a data directory is tokenized with (WordPiece ``vocab.txt`` or a
byte-level BPE ``tokenizer.json``), the tokenizer it loads, the encoding of sentences into flat id arrays, and
the writing of one shard's three arrays and its record. :mod:`bertkit.data.shards` runs this for every shard of
a corpus on local processes, :mod:`bertkit.data.cluster` on a Dask cluster's workers; both read the result with
:class:`bertkit.data.shards.ShardSet`.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.io import atomic_write, atomic_write_json, read_json, read_text

__all__ = [
    "ChunkCache",
    "FORMAT_VERSION",
    "encode_chunks",
    "encode_sentences",
    "load_tokenizer",
    "resolve_vocab",
    "sha256_file",
    "vocab_name",
    "vocab_tokens",
]

FORMAT_VERSION = 1
_ARRAYS = ("ids", "sents", "docs")

# This process's tokenizer and chunk cache when it builds shards for a pool (:mod:`bertkit.data.shards` fills
# it in each worker): what :func:`_build_shard` uses when it is not handed its own.
_WORKER: dict = {}


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
    ``lowercase`` applies to a WordPiece vocabulary only: a tokenizer.json carries its own normaliser.

    A WordPiece tokenizer comes with its plain-text pipeline already chosen (on, unless
    :data:`bertkit.settings.TOKENIZER_FAST_PATH` says otherwise) instead of deciding it at first use: that decision keys
    its per-machine cache on torch, so it imported torch (~1 s of CPU) in every shard-building process, and
    on a machine without a cached choice each process measured the two pipelines first. Both give the same
    ids; on the space-joined blocks of distinct words that shards are built from the plain pipeline is the
    faster one (0.14 s instead of 0.21 s for the 49k distinct words of the Gutenberg books)."""
    from bertkit.settings import TOKENIZER_FAST_PATH
    from bertkit.tokenizer import BPETokenizer, Tokenizer

    path, kind = resolve_vocab(vocab_file)
    if kind == "bpe":
        vocab_tokens(path)  # the model's kind and the special tokens, in one line each
        return BPETokenizer.from_file(path)
    tok = Tokenizer(str(path), lowercase=lowercase)
    tok.fast_path = (TOKENIZER_FAST_PATH.value() or "on") == "on"
    return tok


def vocab_tokens(vocab_file: str | os.PathLike) -> list[str]:
    """The tokens of a vocab.txt or BPE tokenizer.json (or a folder holding one) in id order; the five
    special tokens must be among them."""
    vocab_file, kind = resolve_vocab(vocab_file)
    if not vocab_file.is_file():
        raise UserError(f"{vocab_file}: vocabulary file not found (train one with `bertkit vocab`)")
    if kind == "bpe":
        words = _bpe_tokens(vocab_file)
        fix = "train one with `bertkit vocab --kind bpe`"
    else:
        text = read_text(vocab_file, "vocabulary")
        words = text.split("\n")
        if "\r" in text:  # CRLF lines; most files have none, and 30k rstrips cost ~2 ms
            words = [line.rstrip("\r") for line in words]
        while words and not words[-1]:
            words.pop()
        fix = "use a BERT vocab.txt"
    present = set(words)
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in present]
    if missing:
        raise UserError(f"{vocab_file}: vocabulary lacks {' '.join(missing)}; {fix}")
    return words


def _bpe_tokens(path: Path) -> list[str]:
    """The tokens of a BPE ``tokenizer.json`` (its added tokens included) in id order."""
    data = read_json(path, "tokenizer file")
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

    return walk(read_json(path, "tokenizer file").get("normalizer"))


def _shard_name(index: int) -> str:
    return f"shard_{index:05d}"


class _Numbering(dict):
    """chunk -> number; looking up a chunk not yet numbered gives it the next number and notes it in ``new``,
    so one pass over a shard's words both numbers them and finds those to tokenize (a separate ``set`` of
    the words and then a lookup pass cost a third more)."""

    __slots__ = ("new",)

    def __init__(self) -> None:
        super().__init__()
        self.new: list[str] = []

    def __missing__(self, chunk: str) -> int:
        n = self[chunk] = len(self)
        self.new.append(chunk)
        return n


class ChunkCache:
    """Token ids of distinct space-separated chunks, as one flat table (``ids[off[k]:off[k + 1]]`` for chunk
    number ``k``) so that whole sentences are assembled with a numpy gather. Reset when it grows past ``limit``."""

    def __init__(self, limit: int = 500_000):
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        self.index = _Numbering()
        self.ids = np.zeros(0, dtype=np.int64)
        self.off = np.zeros(1, dtype=np.int64)

    def numbers(self, tok, words: list[str]) -> np.ndarray:
        """int64 [len(words)]: each word's chunk number, tokenizing (and caching) the words not cached yet."""
        try:
            cached = len(self.index)
            wid = self._number(words)
            if cached and len(self.index) > self.limit:  # start again with these words alone
                self.clear()
                wid = self._number(words)
            if self.index.new:
                self._append(tok, self.index.new)
                self.index.new = []
        except BaseException:
            self.clear()  # chunks numbered without their tokens: drop them all
            raise
        return wid

    def _number(self, words: list[str]) -> np.ndarray:
        return np.fromiter(map(self.index.__getitem__, words), dtype=np.int64, count=len(words))

    def _append(self, tok, chunks: list[str]) -> None:
        flat, lengths = encode_chunks(tok, chunks)
        self.ids = np.concatenate((self.ids, flat))
        self.off = np.concatenate((self.off, self.off[-1] + np.cumsum(lengths)))


def encode_chunks(tok, chunks: list[str], block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of space-free ``chunks``: flat int64 ids [n_tokens] and int64 lengths [len(chunks)], exactly
    as ``tok.encode_batch_ids(chunks)`` would give them.

    A chunk that is a whole vocabulary word of ASCII letters and digits is its own id (:func:`_vocab_words`:
    62% of the distinct chunks of the Gutenberg books); the others go through the tokenizer, by blocks
    (:func:`_encode_blocks`). Measured on those books' 14k distinct chunks: 0.038 -> 0.024 CPU-s.
    """
    word_ids = _vocab_words(tok, chunks)
    if word_ids is None:
        return _encode_blocks(tok, chunks, block)
    rest = np.flatnonzero(word_ids < 0)
    rest_flat, rest_lengths = _encode_blocks(tok, [chunks[i] for i in rest], block)
    lengths = np.ones(len(chunks), dtype=np.int64)
    lengths[rest] = rest_lengths
    starts = np.cumsum(lengths) - lengths  # each chunk's first token in the flat ids
    flat = np.empty(int(lengths.sum()), dtype=np.int64)
    words = np.flatnonzero(word_ids >= 0)
    flat[starts[words]] = word_ids[words]
    first = np.cumsum(rest_lengths) - rest_lengths  # each rest chunk's first token in rest_flat
    flat[np.repeat(starts[rest] - first, rest_lengths) + np.arange(rest_flat.size)] = rest_flat
    return flat, lengths


def _vocab_words(tok, chunks: list[str]) -> np.ndarray | None:
    """int64 [len(chunks)]: the id of each chunk that is one vocabulary word made of ASCII letters and digits
    and within the tokenizer's word length, -1 for the others; None for a tokenizer that is not WordPiece.

    Such a chunk is exactly one token: BERT's normaliser changes ASCII letters and digits only by lowercasing
    (uncased), the pre-tokenizer keeps a run of them whole, and WordPiece's longest match first takes the
    whole word when the vocabulary has it."""
    from bertkit.tokenizer import BPETokenizer, Tokenizer

    if not isinstance(tok, Tokenizer) or isinstance(tok, BPETokenizer):
        return None
    get, limit, lower = tok.vocab.get, tok.max_input_chars_per_word, tok.lowercase
    return np.fromiter(
        (
            get(c.lower() if lower else c, -1) if c.isascii() and c.isalnum() and len(c) <= limit else -1
            for c in chunks
        ),
        dtype=np.int64,
        count=len(chunks),
    )


def _encode_blocks(tok, chunks: list[str], block: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`encode_chunks` by the tokenizer. Why not one encoding per chunk: the Rust tokenizer's fixed cost
    per encoding (~6 us) dominates for single words. Instead ``block`` chunks are joined with spaces into one
    text (no token spans a space), encoded in one batch call (parallel over blocks), and each token is
    assigned to its chunk by its character offset. Measured on the 49k distinct Gutenberg words: 0.16 s
    instead of 0.38 s."""
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
    wid = cache.numbers(tok, words)
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


def _encode_running(tok, docs: list[list[str]], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of the documents' sentences (flat) and each one's length, for a byte-level BPE tokenizer.

    Its tokens carry the space before a word (``" word"``): a sentence that follows another starts with the
    spaced token, as in the text the model will read, not the form a text's very first word takes. And not
    by cached space-separated chunks as :func:`encode_sentences`, since a word's ids depend on what precedes
    it."""
    # the sentences as they read in running text: each after a space but a document's first
    sentences = [s if k == 0 or not s else " " + s for doc in docs for k, s in enumerate(doc)]
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
    # Not fsynced either (two fsyncs per shard, ~4 ms each on a VM disk): a record is trusted only once its
    # text sha256, options and every file's checksum match, so one lost in a power failure means its shard is
    # rebuilt, never a wrong shard; an ended process's writes survive in the page cache anyway, and
    # ``prepare`` fsyncs the manifest and the directory last.
    atomic_write_json(out_dir / f"{name}.json", record, fsync=False)
    return record


def _write_array(path: Path, arr: np.ndarray) -> dict:
    """Write ``arr`` as ``.npy`` atomically; returns its sha256 and size, hashed from memory.

    Not fsynced: the shard's record, written after it, holds these checksums and a resumed run re-checks
    them, so a file lost in a crash is rebuilt, and 6 fsyncs per shard are saved."""
    buf = io.BytesIO()
    np.save(buf, arr)
    data = buf.getbuffer()
    with atomic_write(path, "wb", fsync=False) as f:
        f.write(data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def vocab_name(kind: str) -> str:
    """The name a data directory gives its copy of a ``kind`` vocabulary."""
    return "tokenizer.json" if kind == "bpe" else "vocab.txt"
