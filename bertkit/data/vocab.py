"""WordPiece vocabulary training (``bertkit vocab``) with the ``tokenizers`` library's WordPiece trainer,
BERT normalisation (lower-casing and accent stripping unless cased) and BERT pre-tokenisation.

The corpus is streamed three times (the alphabet, training, the counts that order the file), so memory does not
grow with its size beyond the trainer's word counts; progress is the stored (compressed) bytes read over three
times their total, with an ETA, on stderr."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

from bertkit.chars import is_punctuation
from bertkit.data.corpus import CorpusStats, byte_progress, expand_paths, iter_documents
from bertkit.errors import UserError
from bertkit.io import atomic_write

__all__ = ["SPECIAL_TOKENS", "train_vocab"]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_vocab(
    corpus: Iterable[str | os.PathLike],
    vocab_size: int,
    out: str | os.PathLike,
    lowercase: bool = True,
    fmt: str = "auto",
    on_error: str = "raise",
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    progress: bool = True,
) -> dict:
    """Train a WordPiece vocabulary and write ``out`` (one token per line, specials first) atomically."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise UserError(f"--vocab-size must be larger than {len(SPECIAL_TOKENS)}, got {vocab_size}")
    t0 = time.perf_counter()
    corpus = list(corpus)
    stats = CorpusStats()
    bar = byte_progress(
        3 * sum(p.stat().st_size for p in expand_paths(corpus)), "vocab 1/3 alphabet", progress
    )

    def sentences() -> Iterator[str]:
        for doc in _documents(corpus, fmt, on_error, bar, stats):
            yield from doc
        bar.set_description("vocab 2/3 merging", refresh=True)  # the trainer works on after the last line

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    with bar:  # closed on an error too: the bar's line must not be left half-drawn under the message
        # The trainer gives each "##c" (a character inside a word) its id as it meets it while walking a hash
        # map seeded per process, and breaks ties between merges of equal count by those ids: the same corpus
        # gave another vocabulary on every run (huggingface/tokenizers#1794). Registered up front, in sorted
        # order, they take fixed ids, and training is the same on every run.
        inside = _characters_inside_words(corpus, fmt, on_error, tok, limit_alphabet, bar)
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            limit_alphabet=limit_alphabet,
            special_tokens=[*SPECIAL_TOKENS, *(f"##{c}" for c in inside)],
            continuing_subword_prefix="##",
            show_progress=False,  # its bars have no ETA over the corpus; ours does
        )
        bar.set_description("vocab 2/3 training")
        tok.train_from_iterator(sentences(), trainer=trainer)
        bar.set_description("vocab 3/3 counting")
        by_id = _token_counts(corpus, fmt, on_error, tok, bar) if stats.sentences else Counter()
    if stats.sentences == 0:
        raise UserError(f"no text found in {', '.join(map(str, corpus))}; check --corpus and the format")
    vocab = tok.get_vocab()
    missing = [s for s in SPECIAL_TOKENS if s not in vocab]
    if missing:  # cannot happen with the trainer's special_tokens, but never write a vocab without them
        raise RuntimeError(f"trained vocabulary lacks {missing}")
    # The file lists the tokens by how often the trained tokenizer produces them on the corpus, then by the
    # token itself (specials first): most frequent first, as the original release's vocabulary reads, and
    # ids that do not hang on the order the trainer happens to create tokens in (ids matter downstream: data
    # shards, embeddings).
    counts = {w: by_id[i] for w, i in vocab.items()}
    words = list(SPECIAL_TOKENS) + sorted(
        (w for w in vocab if w not in SPECIAL_TOKENS), key=lambda w: (-counts[w], w)
    )
    out = Path(out)
    with atomic_write(out) as f:
        for w in words:
            f.write(w + "\n")
    return vocab_result(out, len(words), vocab_size, lowercase, stats, t0)


def vocab_result(
    out: Path, size: int, requested: int, lowercase: bool, stats: CorpusStats, t0: float, **extra: Any
) -> dict:
    """What ``bertkit vocab`` prints for either kind: the file, its size, the corpus read, the time taken."""
    return {
        "out": str(out),
        **extra,
        "vocab_size": size,
        "requested_vocab_size": requested,
        "lowercase": lowercase,
        "documents": stats.documents,
        "sentences": stats.sentences,
        "text_bytes": stats.bytes,
        "skipped_lines": stats.skipped_lines,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _token_counts(corpus: list, fmt: str, on_error: str, tok: Any, bar: Any) -> Counter[int]:
    """How often ``tok`` produces each token id on the corpus."""
    by_id: Counter[int] = Counter()
    for chunk in _chunks(corpus, fmt, on_error, bar):
        by_id.update(chain.from_iterable(e.ids for e in tok.encode_batch(chunk, add_special_tokens=False)))
    return by_id


def _documents(
    corpus: list, fmt: str, on_error: str, bar: Any, stats: CorpusStats | None = None
) -> Iterator[list[str]]:
    """The corpus's documents, advancing the progress ``bar`` by the stored bytes read."""
    stats = CorpusStats() if stats is None else stats
    shown = 0
    for doc in iter_documents(corpus, fmt, on_error=on_error, stats=stats):
        yield doc
        if stats.input_bytes - shown >= 1 << 16:  # not per document: tqdm's update costs microseconds
            bar.update(stats.input_bytes - shown)
            shown = stats.input_bytes
    bar.update(stats.input_bytes - shown)


def _chunks(corpus: list, fmt: str, on_error: str, bar: Any, size: int = 1 << 20) -> Iterator[list[str]]:
    """The corpus's sentences in lists of about ``size`` characters: few calls into the tokenizer, and memory
    bounded whatever the size of a document."""
    chunk: list[str] = []
    n = 0
    for doc in _documents(corpus, fmt, on_error, bar):
        for line in doc:
            chunk.append(line)
            n += len(line)
            if n >= size:
                yield chunk
                chunk, n = [], 0
    if chunk:
        yield chunk


def _characters_inside_words(
    corpus: list, fmt: str, on_error: str, tok: Any, limit_alphabet: int, bar: Any
) -> list[str]:
    """The characters that follow another one inside a word after ``tok``'s normalisation and BERT's
    pre-tokenisation (those the trainer makes "##c" pieces of), among the ``limit_alphabet`` most frequent
    characters (the trainer's alphabet; it drops the rest), sorted."""
    inside: set[str] = set()
    seen: Counter[str] = Counter()
    for chunk in _chunks(corpus, fmt, on_error, bar):
        # the normaliser works character by character and turns line breaks into spaces, so a chunk is
        # normalised in one call; deleting the first character of every word leaves the characters inside
        # words (ten times faster than listing the words)
        text = tok.normalizer.normalize_str("\n".join(chunk))
        seen.update(text)
        # the pre-tokenizer splits at whitespace (Unicode's, as str.isspace) and at BERT's punctuation
        sep = "".join(re.escape(c) for c in {" ", *text} if c.isspace() or is_punctuation(c))
        rest = re.sub(f"(?<![^{sep}])[^{sep}]", "", text)
        inside.update(c for c in set(rest) if not (c.isspace() or is_punctuation(c)))
    ranked = sorted(((c, k) for c, k in seen.items() if not c.isspace()), key=lambda ck: (-ck[1], ck[0]))
    return sorted(inside & {c for c, _ in ranked[:limit_alphabet]})
