"""Byte-level BPE tokenizer training (``bertkit vocab --kind bpe``): a ``tokenizer.json`` laid out as
ModernBERT's, for a from-scratch ModernBERT (or any model the BPE tokenizer serves).

The file: NFC normalisation (then lower-casing unless cased), byte-level pre-tokenisation without a prefix
space and its decoder, BPE merges over the 256 byte symbols, the special tokens ``[PAD] [UNK] [CLS] [SEP]
[MASK]`` as ids 0-4 (``[MASK]`` strips the whitespace before it, so ``"a [MASK]"`` masks the word with its
space), and ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` around inputs.

Casing: byte-level BPE keeps every character, case included; lower-casing is a normaliser step, added when
the vocabulary is not ``cased``, as for WordPiece, so one ``--cased`` means the same for both kinds. Accents
are kept either way (NFC only composes them).

The trainer is deterministic on its own (merges are chosen by count, ties by the pair's symbols, and the
byte alphabet is fixed): the same corpus gives the same bytes in every process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertkit.data.corpus import CorpusStats, byte_progress, expand_paths
from bertkit.data.vocab import SPECIAL_TOKENS, _documents, vocab_result
from bertkit.errors import UserError
from bertkit.io import atomic_write

__all__ = ["BYTE_ALPHABET_SIZE", "train_bpe"]

BYTE_ALPHABET_SIZE = 256  # byte-level BPE starts from one symbol per byte value


def train_bpe(
    corpus: Iterable[str | os.PathLike],
    vocab_size: int,
    out: str | os.PathLike,
    lowercase: bool = True,
    fmt: str = "auto",
    on_error: str = "raise",
    min_frequency: int = 2,
    progress: bool = True,
) -> dict:
    """Train a byte-level BPE tokenizer and write it as one ``tokenizer.json`` at ``out`` atomically.

    ``vocab_size`` counts the specials and the 256 byte symbols; the result may be smaller when the corpus
    offers fewer merges of ``min_frequency`` or more."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    smallest = len(SPECIAL_TOKENS) + BYTE_ALPHABET_SIZE + 1
    if vocab_size < smallest:
        raise UserError(
            f"--vocab-size must be at least {smallest} for --kind bpe (5 special tokens, 256 bytes, one merge), "
            f"got {vocab_size}"
        )
    t0 = time.perf_counter()
    corpus = list(corpus)
    stats = CorpusStats()
    bar = byte_progress(sum(p.stat().st_size for p in expand_paths(corpus)), "vocab (bpe)", progress)

    def sentences() -> Iterator[str]:
        for doc in _documents(corpus, fmt, on_error, bar, stats):
            yield from doc

    tok = Tokenizer(models.BPE())
    steps = [normalizers.NFC()] + ([normalizers.Lowercase()] if lowercase else [])
    tok.normalizer = steps[0] if len(steps) == 1 else normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # its bars have no ETA over the corpus; ours does
    )
    with bar:  # closed on an error too: the bar's line must not be left half-drawn under the message
        tok.train_from_iterator(sentences(), trainer=trainer)
    if stats.sentences == 0:
        raise UserError(f"no text found in {', '.join(map(str, corpus))}; check --corpus and the format")
    ids = {s: tok.token_to_id(s) for s in SPECIAL_TOKENS}
    if list(ids.values()) != list(range(len(SPECIAL_TOKENS))):  # the trainer puts them first
        raise RuntimeError(f"trained tokenizer has its special tokens at {ids}")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    # the same token, now stripping the whitespace on its left, as ModernBERT's [MASK] does
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    out = Path(out)
    with atomic_write(out) as f:
        f.write(tok.to_str(pretty=True))
    return vocab_result(
        out, tok.get_vocab_size(with_added_tokens=True), vocab_size, lowercase, stats, t0, kind="bpe"
    )
