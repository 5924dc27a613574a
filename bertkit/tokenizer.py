"""BERT tokenization: normalisation + WordPiece, built from the ``tokenizers`` library's components.

The pipeline is the original release's: clean control characters and whitespace, put spaces around
CJK characters, lowercase and strip accents (uncased models), split on whitespace and punctuation,
then greedy longest-match-first WordPiece with ``##`` continuations; a word longer than
``max_input_chars_per_word`` characters, or one that cannot be covered by the vocabulary, becomes
``[UNK]``. Pairs are laid out ``[CLS] A [SEP] B [SEP]`` with segment ids 0 and 1.

Special tokens are looked up by their names in the vocabulary, never by fixed id.

Texts made only of "plain" characters (ASCII and the common Latin/punctuation blocks that the BERT
normaliser leaves alone apart from lowercasing; see :mod:`bertkit.tokenizer_fast_path`) go through a
second, cheaper pipeline that gives identical ids, offsets and word ids; every other text takes the full
one. ``Tokenizer.fast_path = False`` turns this off.

:class:`BPETokenizer` runs a ``tokenizer.json`` whose model is BPE (ModernBERT's byte-level BPE) behind the same
interface: same calls, same outputs' layout, ids equal transformers' ``PreTrainedTokenizerFast`` on the folder.
The file is run as it is written: its normaliser, pre-tokenizer, BPE merges, post-processor (ModernBERT's
``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``), added tokens (``[MASK]`` with its left-strip) and decoder. Only
the five special tokens are looked up, by the names ``tokenizer_config.json`` (or ``special_tokens_map.json``)
gives, else by BERT's and RoBERTa's usual names. What differs from WordPiece inside the shared code: byte-level
tokens carry their whitespace (``" word"``, ``"\\n\\n"``), so a long text is cut for truncation by slicing the
original text after a word, never by re-joining words with single spaces; and the cheaper plain-text pipeline
(BERT's normaliser) is never used.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Encoding, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as _RustTokenizer

from .errors import UserError
from .io import atomic_write, atomic_write_json, read_json, read_json_object
from .tokenizer_fast_path import (
    PlainText,
    cut_texts,
    decide_fast_path,
    fast_normalizer,
    fast_pre_tokenizer,
    plain_text,
)

SPECIAL_TOKENS = {"unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]"}
TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_JSON = "tokenizer.json"


def read_vocab(vocab_file: str | os.PathLike) -> list[str]:
    """Tokens of a ``vocab.txt`` in id order (one per line)."""
    path = Path(vocab_file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}: not UTF-8 text (byte {e.start}); a vocab.txt has one token per line"
        ) from None
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    if "\r" in text:  # CRLF lines (most files have none: no 30k rstrips)
        tokens = [t.rstrip("\r") for t in tokens]
    if not tokens:
        raise UserError(f"{path}: the vocabulary is empty")
    return tokens


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_texts(texts: Sequence[Any], what: str) -> None:
    """Say which input the tokenizers library rejected: a non-str is a TypeError (a programming error), a
    str with a lone surrogate (valid JSON, ``"\\ud800"``, but not Unicode text) is a UserError."""
    for i, t in enumerate(texts):
        if t is None and what == "pairs":
            continue
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] must be a str, got {type(t).__name__}")
        m = _SURROGATE.search(t)
        if m:
            raise UserError(
                f"{what}[{i}]: lone surrogate U+{ord(m.group()):04X} at character {m.start()} is not valid "
                "Unicode text; fix the input's encoding"
            )


@contextlib.contextmanager
def _encoding_errors(
    texts: Sequence[Any], pairs: Sequence[Any] | None, max_length: Any, truncation: Any
) -> Iterator[None]:
    """What the tokenizers library raises while encoding, said in one line: a TypeError names the input it
    came from (:func:`_check_texts`); any other error is an impossible truncation, a ValueError."""
    try:
        yield
    except TypeError:
        _check_texts(texts, "texts")
        if pairs is not None:
            _check_texts(pairs, "pairs")
        raise
    except Exception as e:  # tokenizers reports impossible truncations as generic exceptions
        raise ValueError(
            f"cannot encode with max_length={max_length}, truncation={truncation!r}: {e}"
        ) from None


def _no_empty_pairs(pairs: Sequence[Any], n_texts: int) -> list[Any]:
    """``pairs`` (one per text, else a ValueError) with ``""`` as None: an empty second segment is no second
    segment. transformers' tok(a, "") and the original run_classifier.py (`if example.text_b:`) both encode
    [CLS] a [SEP], not [CLS] a [SEP] [SEP]."""
    pairs = [None if p == "" else p for p in pairs]
    if len(pairs) != n_texts:
        raise ValueError(f"got {n_texts} texts but {len(pairs)} pairs")
    return pairs


def _pair_inputs(texts: list[Any], pairs: list[Any] | None) -> tuple[list[Any], int]:
    """What the library encodes (each text, or its ``(text, pair)``) and the special tokens a sequence
    gets: 3 when some text has a pair, else 2."""
    if pairs is None:
        return texts, 2
    n_special = 3 if any(b is not None for b in pairs) else 2
    return [a if b is None else (a, b) for a, b in zip(texts, pairs)], n_special


def _check_max_length(max_length: Any, n_special: int) -> None:
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int):
        raise UserError(f"max_length must be an integer, got {max_length!r}")
    if max_length < n_special + 1:
        raise UserError(
            f"max_length {max_length} is too small: the special tokens alone take {n_special}; use at least "
            f"{n_special + 1}"
        )


class Tokenizer:
    """BERT WordPiece tokenizer.

    Args:
        vocab_file: ``vocab.txt``, one token per line, line number = id.
        lowercase: lowercase the text (uncased models); also strips accents unless ``strip_accents``
            says otherwise.
        strip_accents: ``None`` follows ``lowercase`` (as the original release); True/False forces it.
        tokenize_chinese_chars: surround CJK characters with spaces so each is its own word.
        max_input_chars_per_word: longer words become ``[UNK]`` (100 as transformers; the original
            release used 200).
        model_max_length: the longest sequence the model takes (used by ``max_length="model"``).

    Attributes:
        fast_path: send texts whose characters are all plain through the cheaper pipeline (same
            output). Chosen at first use by a short measurement on this machine (cached; see
            :func:`bertkit.tokenizer_fast_path.decide_fast_path`); set False to always use the full BERT
            normaliser and pre-tokenizer, True to always route plain texts the cheap way.
    """

    _fast_path: bool | None = None

    @property
    def fast_path(self) -> bool:
        if self._fast_path is None:
            self._fast_path = decide_fast_path(self._tok, self._fast_tok, self.ids_to_tokens)[0] == "on"
        return self._fast_path

    @fast_path.setter
    def fast_path(self, on: bool) -> None:
        self._fast_path = bool(on)

    def __init__(
        self,
        vocab_file: str | os.PathLike,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        max_input_chars_per_word: int = 100,
        model_max_length: int = 512,
    ) -> None:
        self._init(
            read_vocab(vocab_file),
            str(vocab_file),
            lowercase,
            strip_accents,
            tokenize_chinese_chars,
            max_input_chars_per_word,
            model_max_length,
        )

    @classmethod
    def from_vocab(cls, tokens: Sequence[str], **settings: Any) -> Tokenizer:
        """Build from a list of tokens in id order instead of a file."""
        self = cls.__new__(cls)
        self._init(list(tokens), "<vocab list>", **settings)
        return self

    def _init(
        self,
        tokens: list[str],
        source: str,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        max_input_chars_per_word: int = 100,
        model_max_length: int = 512,
    ) -> None:
        vocab: dict[str, int] = {}
        for i, tok in enumerate(tokens):
            vocab.setdefault(tok, i)  # a duplicate line keeps its first id, as transformers' loader
        missing = [name for name in SPECIAL_TOKENS.values() if name not in vocab]
        if missing:
            raise UserError(
                f"{source}: the vocabulary lacks the special token(s) {', '.join(missing)}; "
                "a BERT vocabulary needs [PAD] [UNK] [CLS] [SEP] [MASK] (bertkit vocab adds them)"
            )
        if not isinstance(max_input_chars_per_word, int) or max_input_chars_per_word < 1:
            raise UserError(
                f"{source}: max_input_chars_per_word must be an integer >= 1, got {max_input_chars_per_word!r}"
            )
        self.vocab = vocab
        self.ids_to_tokens = list(tokens)
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.max_input_chars_per_word = max_input_chars_per_word
        self.model_max_length = model_max_length
        self._set_special_tokens(SPECIAL_TOKENS)
        self._plain: PlainText = plain_text(lowercase, strip_accents, tokenize_chinese_chars)
        # One WordPiece model serves both pipelines (the library shares it; nothing mutates it): building
        # it from the 30k-entry vocabulary is most of a pipeline's cost (~12 ms).
        model = models.WordPiece(
            vocab,
            unk_token=self.unk_token,
            max_input_chars_per_word=max_input_chars_per_word,
            continuing_subword_prefix="##",
        )
        self._tok = self._build_backend(fast=False, model=model)
        self._fast_tok = self._build_backend(fast=True, model=model)
        self._pad_longest = False  # whether _configure set Rust padding to the longest in the batch

    def _set_special_tokens(self, names: dict[str, str]) -> None:
        """``{role}_token`` and ``{role}_token_id`` for each role of ``names`` (role -> token), and
        ``all_special_ids``."""
        for role, name in names.items():
            setattr(self, f"{role}_token", name)
            setattr(self, f"{role}_token_id", self.vocab[name])
        self.all_special_ids = sorted({self.vocab[name] for name in names.values()})

    def _build_backend(self, fast: bool, model: models.WordPiece) -> _RustTokenizer:
        """The Rust pipeline running ``model``; ``fast=True`` builds the one for plain texts (cheap normaliser
        and one-pass pre-tokenizer, everything else the same)."""
        tok = _RustTokenizer(model)
        if fast:
            normalizer = fast_normalizer(self.lowercase)
            if normalizer is not None:
                tok.normalizer = normalizer
            tok.pre_tokenizer = fast_pre_tokenizer(self._plain)
        else:
            tok.normalizer = normalizers.BertNormalizer(
                clean_text=True,
                handle_chinese_chars=self.tokenize_chinese_chars,
                strip_accents=self.strip_accents,
                lowercase=self.lowercase,
            )
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls, sep = self.cls_token, self.sep_token
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, self.cls_token_id), (sep, self.sep_token_id)],
        )
        tok.decoder = decoders.WordPiece(prefix="##")
        # Special tokens written in the text ("a [MASK] here") stay whole, as in transformers.
        tok.add_special_tokens(
            [AddedToken(t, normalized=False, special=True) for t in SPECIAL_TOKENS.values()]
        )
        return tok

    # ------------------------------------------------------------ persistence
    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, **overrides: Any) -> Tokenizer:
        """Load from a model directory: ``vocab.txt`` with the settings in ``tokenizer_config.json`` (else its
        ``tokenizer.json``); or from a bare ``vocab.txt`` or ``tokenizer.json`` file."""
        model_dir = Path(model_dir)
        if model_dir.is_file():  # a bare vocab.txt, or a tokenizer.json (`bertkit vocab --kind bpe`)
            if model_dir.suffix.lower() == ".json":
                return cls._from_tokenizer_json(model_dir, **overrides)
            return cls(model_dir, **overrides)
        settings = cls._config_settings(model_dir / TOKENIZER_CONFIG)
        vocab_file = model_dir / VOCAB_FILE
        if not vocab_file.is_file():
            if (model_dir / TOKENIZER_JSON).is_file():
                # tokenizer.json's normalizer says how text is cased and split; the config adds the length limit
                # (where sentence-transformers >= 5 keeps a model's max_seq_length)
                limit = {k: settings[k] for k in ("model_max_length",) if k in settings}
                return cls._from_tokenizer_json(model_dir / TOKENIZER_JSON, **{**limit, **overrides})
            raise UserError(f"{model_dir}: no {VOCAB_FILE} or {TOKENIZER_JSON} found")
        settings.update(overrides)
        return cls(vocab_file, **settings)

    @staticmethod
    def _config_settings(config_file: Path) -> dict[str, Any]:
        """The constructor settings ``tokenizer_config.json`` gives (none when the file is absent)."""
        settings: dict[str, Any] = {}
        cfg = read_json_object(config_file)
        if "do_lower_case" in cfg:
            settings["lowercase"] = bool(cfg["do_lower_case"])
        if cfg.get("strip_accents") is not None:
            settings["strip_accents"] = bool(cfg["strip_accents"])
        if "tokenize_chinese_chars" in cfg:
            settings["tokenize_chinese_chars"] = bool(cfg["tokenize_chinese_chars"])
        if isinstance(cfg.get("model_max_length"), int) and cfg["model_max_length"] < 10**6:
            settings["model_max_length"] = cfg["model_max_length"]
        if isinstance(cfg.get("max_input_chars_per_word"), int):
            settings["max_input_chars_per_word"] = _word_limit(cfg["max_input_chars_per_word"], config_file)
        return settings

    @classmethod
    def _from_tokenizer_json(cls, path: Path, **overrides: Any) -> Tokenizer:
        data = read_json(path, "tokenizer file")
        model = data.get("model") if isinstance(data, dict) else None
        # byte-level BPE (ModernBERT's, RoBERTa's) and SentencePiece's Unigram (XLM-RoBERTa's) run as the file says
        if isinstance(model, dict) and model.get("type") in ("BPE", "Unigram"):
            return BPETokenizer.from_file(path, **overrides)
        if not isinstance(model, dict) or model.get("type") != "WordPiece":
            kind = model.get("type") if isinstance(model, dict) else None
            raise UserError(f"{path}: not a WordPiece, BPE or Unigram tokenizer (model type {kind!r})")
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not vocab or not all(isinstance(i, int) for i in vocab.values()):
            raise UserError(f"{path}: 'model.vocab' must be an object mapping each token to its integer id")
        tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
        norm = data.get("normalizer") or {}
        if not isinstance(norm, dict):
            raise UserError(f"{path}: 'normalizer' must be an object")
        settings = dict(
            lowercase=bool(norm.get("lowercase", True)),
            strip_accents=norm.get("strip_accents"),
            tokenize_chinese_chars=bool(norm.get("handle_chinese_chars", True)),
            max_input_chars_per_word=_word_limit(model.get("max_input_chars_per_word", 100), path),
        )
        settings.update(overrides)
        return cls.from_vocab(tokens, **settings)

    def save_pretrained(self, model_dir: str | os.PathLike) -> None:
        """Write ``vocab.txt``, ``tokenizer_config.json``, ``special_tokens_map.json`` and ``tokenizer.json``."""
        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        with atomic_write(model_dir / VOCAB_FILE) as f:
            f.write("".join(t + "\n" for t in self.ids_to_tokens))
        specials = self._special_tokens_map(("unk", "sep", "pad", "cls", "mask"))
        atomic_write_json(
            model_dir / TOKENIZER_CONFIG,
            {
                "tokenizer_class": "BertTokenizer",
                "do_lower_case": self.lowercase,
                "strip_accents": self.strip_accents,
                "tokenize_chinese_chars": self.tokenize_chinese_chars,
                "max_input_chars_per_word": self.max_input_chars_per_word,
                "model_max_length": self.model_max_length,
                **specials,
            },
        )
        atomic_write_json(model_dir / "special_tokens_map.json", specials)
        with atomic_write(model_dir / TOKENIZER_JSON) as f:
            f.write(self._tok.to_str())

    def _special_tokens_map(self, roles: Sequence[str]) -> dict[str, str]:
        """``{"{role}_token": token}`` for ``roles``, in that order (as the written files list them)."""
        return {f"{role}_token": getattr(self, f"{role}_token") for role in roles}

    def _no_truncation_or_padding(self) -> None:
        for tok in (self._tok, self._fast_tok):
            tok.no_truncation()
            tok.no_padding()
        self._pad_longest = False

    # ----------------------------------------------------------------- basics
    def __len__(self) -> int:
        return len(self.ids_to_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.ids_to_tokens)

    @property
    def backend(self) -> _RustTokenizer:
        """The underlying ``tokenizers.Tokenizer`` (no truncation or padding configured)."""
        return self._tok

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        if isinstance(tokens, str):
            return self.vocab.get(tokens, self.unk_token_id)
        return [self.vocab.get(t, self.unk_token_id) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        if isinstance(ids, int):
            return self.ids_to_tokens[ids]
        return [self.ids_to_tokens[int(i)] for i in ids]

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of ``text`` without special tokens."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            return self._backend_for(text).encode(text, add_special_tokens=False).tokens
        except TypeError:
            _check_texts([text], "texts")
            raise

    def encode_batch_ids(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
        """Token ids of many texts (the fast path for data preparation: no offsets are computed)."""
        texts = list(texts)
        self._no_truncation_or_padding()
        try:
            encodings = self._encode_routed(texts, texts, None, add_special_tokens, offsets=False)
        except TypeError:
            _check_texts(texts, "texts")
            raise
        return [e.ids for e in encodings]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``: ``##`` pieces joined to their word, words joined by spaces."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    # --------------------------------------------------------------- routing
    def _backend_for(self, text: str, pair: str | None = None) -> _RustTokenizer:
        """The cheap pipeline when every character of the input is plain, else the full one."""
        plain = self.fast_path and self._plain.is_plain(text) and (pair is None or self._plain.is_plain(pair))
        return self._fast_tok if plain else self._tok

    def _encode_routed(
        self,
        inputs: list[Any],
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        add_special_tokens: bool = True,
        offsets: bool = True,
    ) -> list[Encoding]:
        """Batch-encode ``inputs`` (``texts`` or their zip with ``pairs``), the plain ones through the
        cheap pipeline and the rest through the full one, in the input order.

        ``offsets=False`` uses the batch encoder that skips character offsets where the installed
        tokenizers has it. Both pipelines must already be configured alike (``_configure``). A batch
        split across the two pipelines is padded to its longest here, as one Rust call would have.
        """
        full, fast = self._tok, self._fast_tok
        method = "encode_batch_fast" if not offsets and hasattr(full, "encode_batch_fast") else "encode_batch"
        if not self.fast_path:
            return getattr(full, method)(inputs, add_special_tokens=add_special_tokens)
        is_plain = self._plain.is_plain
        if pairs is None:
            route = [is_plain(t) for t in texts]
        else:
            route = [is_plain(a) and (b is None or is_plain(b)) for a, b in zip(texts, pairs)]
        n_plain = sum(route)
        if n_plain == len(inputs):
            return getattr(fast, method)(inputs, add_special_tokens=add_special_tokens)
        if n_plain == 0:
            return getattr(full, method)(inputs, add_special_tokens=add_special_tokens)
        out: list[Any] = [None] * len(inputs)
        for tok, want in ((fast, True), (full, False)):
            idx = [i for i, r in enumerate(route) if r is want]
            for i, enc in zip(
                idx, getattr(tok, method)([inputs[i] for i in idx], add_special_tokens=add_special_tokens)
            ):
                out[i] = enc
        if self._pad_longest:
            # Each half was padded to its own longest (rounded up to the multiple, which commutes with
            # max); pad the shorter half on to the batch's longest, exactly as one call pads.
            width = max(len(e.ids) for e in out)
            for enc in out:
                if len(enc.ids) < width:
                    enc.pad(width, pad_id=self.pad_token_id, pad_token=self.pad_token)
        return out

    # --------------------------------------------------------------- encoding
    def _configure(
        self,
        max_length: int | None,
        truncation: bool | str | None,
        stride: int,
        padding: bool | str,
        pad_to_multiple_of: int | None = None,
        n_special: int = 2,
    ) -> None:
        """Set truncation and padding on both pipelines (they must always be configured alike).

        ``n_special``: the special tokens each sequence gets (2 single, 3 pair, 0 without them); a
        ``max_length`` that leaves no room for text is refused (the library would silently not truncate)."""
        if truncation is None:
            truncation = max_length is not None
        if truncation:
            _check_max_length(max_length, n_special)
            strategy = "longest_first" if truncation is True else truncation
            if strategy not in TRUNCATION_STRATEGIES:
                raise ValueError(
                    f"truncation must be True/False or one of {TRUNCATION_STRATEGIES}, got {truncation!r}"
                )
            limit = self.model_max_length if max_length is None else max_length
            if stride >= limit:
                raise ValueError(f"stride ({stride}) must be smaller than max_length ({limit})")
        if padding == "max_length" and max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        for tok in (self._tok, self._fast_tok):
            if truncation:
                tok.enable_truncation(limit, stride=stride, strategy=strategy)
            else:
                tok.no_truncation()
            if padding == "max_length":
                tok.enable_padding(pad_id=self.pad_token_id, pad_token=self.pad_token, length=max_length)
            elif padding:
                tok.enable_padding(
                    pad_id=self.pad_token_id, pad_token=self.pad_token, pad_to_multiple_of=pad_to_multiple_of
                )
            else:
                tok.no_padding()
        self._pad_longest = bool(padding) and padding != "max_length"

    def encode(
        self,
        text: str,
        pair: str | None = None,
        max_length: int | None = None,
        truncation: bool | str | None = None,
        stride: int = 0,
        add_special_tokens: bool = True,
    ) -> Encoding:
        """One text (or pair) -> a ``tokenizers.Encoding`` with ``.ids``, ``.type_ids``, ``.tokens``,
        ``.offsets`` (character spans in the input), ``.word_ids``, ``.attention_mask`` and, when
        truncated with a ``max_length``, ``.overflowing`` windows that overlap by ``stride`` tokens.

        No truncation unless ``max_length`` or ``truncation`` is given (as transformers).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if pair is not None and not isinstance(pair, str):
            raise TypeError(f"pair must be a str or None, got {type(pair).__name__}")
        if pair == "":
            pair = None  # see _no_empty_pairs
        n_special = (3 if pair is not None else 2) if add_special_tokens else 0
        self._configure(max_length, truncation, stride, padding=False, n_special=n_special)
        with _encoding_errors([text], [pair], max_length, truncation):
            return self._backend_for(text, pair).encode(text, pair, add_special_tokens=add_special_tokens)

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        max_length: int | None = None,
        truncation: bool | str | None = None,
        padding: bool | str = False,
        stride: int = 0,
        add_special_tokens: bool = True,
    ) -> list[Encoding]:
        """Many texts (or pairs) at once, in parallel in Rust -> list of ``tokenizers.Encoding``."""
        texts = list(texts)
        if pairs is not None:
            pairs = _no_empty_pairs(pairs, len(texts))
        inputs, n_special = _pair_inputs(texts, pairs)
        self._configure(
            max_length, truncation, stride, padding, n_special=n_special if add_special_tokens else 0
        )
        with _encoding_errors(texts, pairs, max_length, truncation):
            return self._encode_routed(inputs, texts, pairs, add_special_tokens)

    def __call__(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        max_length: int | None = None,
        padding: bool | str = True,
        truncation: bool | str | None = None,
        return_tensors: str | None = "pt",
        pad_to_multiple_of: int | None = None,
    ) -> dict[str, Any]:
        """Batch-encode -> dict of ``input_ids``, ``token_type_ids``, ``attention_mask``.

        ``return_tensors="pt"``: [B, T] int64 tensors (needs padding unless all lengths are equal);
        ``"np"``: numpy arrays; ``None``: lists (a single str input gives flat lists, as transformers).
        ``padding``: True pads to the longest, ``"max_length"`` to ``max_length``, False not at all.
        """
        single = isinstance(texts, str)
        if single:
            texts = [texts]
            if pairs is not None:
                if not isinstance(pairs, str):
                    raise TypeError(f"pairs must be a str when texts is a str, got {type(pairs).__name__}")
                pairs = [pairs]
        elif not isinstance(texts, Sequence):
            raise TypeError(f"texts must be a str or a sequence of str, got {type(texts).__name__}")
        if pairs is not None:
            if isinstance(pairs, str) or not isinstance(pairs, Sequence):
                raise TypeError(f"pairs must be a sequence of str like texts, got {type(pairs).__name__}")
            pairs = _no_empty_pairs(pairs, len(texts))
        if return_tensors is not None and return_tensors not in ("pt", "np"):
            raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")
        # Tensors padded to the longest are built in numpy from the unpadded ids: cheaper than padding
        # in Rust and reading every padded list back.
        pad_here = return_tensors is not None and padding in (True, "longest")
        truncating = truncation is not None or max_length is not None
        if (
            pairs is not None
            and truncating
            and truncation in (None, True, "longest_first", "only_first", "only_second")
        ):
            # Pairs are pre-cut like single texts, so no request hands the library's pair truncation an
            # unbounded text (it costs ~ the product of the two lengths: 1 MB + 1 MB took 21 GB).
            pair_limit = self.model_max_length if max_length is None else max_length
            _check_max_length(pair_limit, 3)
            texts, pairs = self._precut_pairs(texts, pairs, pair_limit, truncation)
        inputs, n_special = _pair_inputs(texts, pairs)
        self._configure(
            max_length, truncation, 0, False if pad_here else padding, pad_to_multiple_of, n_special=n_special
        )
        # Offsets are not returned here, so the batch encoder that skips computing them is used (when the
        # installed tokenizers has it): this keeps the wrapper as fast as the raw library.
        limit = None
        if (
            pairs is None
            and truncating
            and (pad_here or not padding)
            and truncation in (None, True, "longest_first", "only_first")
        ):
            limit = self.model_max_length if max_length is None else max_length
        cut: list[int] = []
        if limit is not None:
            inputs, cut = self._cut_texts(texts, limit)
        with _encoding_errors(texts, pairs, max_length, truncation):
            encodings = self._encode_routed(inputs, inputs if pairs is None else texts, pairs, offsets=False)
            for i in cut:  # a cut text must still fill the window, else encode it whole
                if len(encodings[i].ids) < limit:
                    encodings[i] = self._encode_routed([texts[i]], [texts[i]], None, offsets=False)[0]
        keys = (("input_ids", "ids"), ("token_type_ids", "type_ids"), ("attention_mask", "attention_mask"))
        if return_tensors is None:
            out = {k: [getattr(e, a) for e in encodings] for k, a in keys}
            return {k: v[0] for k, v in out.items()} if single else out
        if pad_here:
            arrays = self._padded_arrays(encodings, pairs is not None, pad_to_multiple_of)
        else:
            arrays = self._arrays(encodings, pairs is not None)
        if return_tensors == "np":
            return arrays
        import torch

        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    def _cut_texts(self, texts: Sequence[str], limit: int) -> tuple[Sequence[str], list[int]]:
        """:func:`bertkit.tokenizer_fast_path.cut_texts` for this pipeline (a hook: BPE cuts otherwise)."""
        return cut_texts(texts, limit, self._plain if self.fast_path else None)

    def _ntokens(self, text: str) -> int:
        return len(self.encode_batch_ids([text])[0])

    def _count_tokens(self, text: str, words: int = 4096) -> int:
        """The token count of a long text, counted ``words`` whitespace words at a time (tokens never span
        whitespace), so memory stays bounded whatever the length."""
        n, rest = 0, text
        while rest:
            parts = rest.split(None, words)
            rest = parts.pop() if len(parts) > words else ""
            n += self._ntokens(" ".join(parts))
        return n

    @staticmethod
    def _widen(text: str, short: str) -> str:
        """``text`` cut after twice as many whitespace words as ``short`` holds (``text`` itself if shorter)."""
        words = 2 * max(len(short.split()), 1)
        parts = text.split(None, words)
        return text if len(parts) <= words else " ".join(parts[:words])

    def _precut(self, texts: Sequence[str | None], limit: int) -> tuple[list[str | None], set[int]]:
        """``texts`` cut where their tail cannot reach a ``limit``-token window, each cut text keeping at
        least ``limit - 2`` tokens (or left whole), and the indices cut. A text cut at whitespace words (not
        plain) is checked, since words may vanish in normalisation; while short, it is widened."""
        cut_in, cut = self._cut_texts(texts, limit)  # (it passes over the pairs that are None)
        out, done = list(texts), set()
        for i in cut:
            text, short = texts[i], cut_in[i]
            plain_cut = self.fast_path and "[" not in text and self._plain.is_plain(text)
            while not plain_cut and short != text and self._ntokens(short) < limit - 2:
                short = self._widen(text, short)
            out[i] = short
            if short != text:
                done.add(i)
        return out, done

    def _precut_pairs(
        self, texts: Sequence[str], pairs: Sequence[str | None], limit: int, truncation: Any
    ) -> tuple[list[str], list[str | None]]:
        """Pre-cut the sides of pairs so that truncation to ``limit`` gives exactly what the whole texts give.

        Each cut side keeps at least ``limit - 2`` tokens, more than its share. ``longest_first`` also looks at
        which side is longer (it gives the odd token to it), so a cut side is widened until the order of the
        two lengths is the whole texts' order; only when both sides are cut are the whole texts counted
        (single-text tokenization, linear in the length, not the pair truncation's product)."""
        a, cut_a = self._precut(texts, limit) if truncation != "only_second" else (list(texts), set())
        b, cut_b = self._precut(pairs, limit) if truncation != "only_first" else (list(pairs), set())
        if truncation in ("only_first", "only_second"):
            return a, b  # the other side is whole; the cut side's length beyond its share does not matter
        for i in cut_a | cut_b:
            if pairs[i] is None:
                continue
            want = None  # sign(n1 - n2) of the whole texts, counted only when both sides stay cut
            while True:  # every pass widens one side, so this ends (at the latest with both whole)
                m1, m2 = self._ntokens(a[i]), self._ntokens(b[i])
                a_cut, b_cut = a[i] != texts[i], b[i] != pairs[i]
                if not (a_cut or b_cut):
                    break
                if a_cut and not b_cut:  # the whole first side has at least m1 tokens
                    if m1 > m2:
                        break
                    a[i] = self._widen(texts[i], a[i])
                elif b_cut and not a_cut:
                    if m2 > m1:
                        break
                    b[i] = self._widen(pairs[i], b[i])
                else:
                    if want is None:
                        n1, n2 = self._count_tokens(texts[i]), self._count_tokens(pairs[i])
                        want = (n1 > n2) - (n1 < n2)
                    if (m1 > m2) - (m1 < m2) == want:
                        break
                    if want == 0:
                        a[i], b[i] = texts[i], pairs[i]
                    elif want > 0:
                        a[i] = self._widen(texts[i], a[i])
                    else:
                        b[i] = self._widen(pairs[i], b[i])
        return a, b

    def _padded_arrays(self, encodings: list[Encoding], pairs: bool, multiple: int | None) -> dict[str, Any]:
        """Unpadded encodings -> [B, T] int64 arrays padded on the right to the longest (rounded up to
        ``multiple``), exactly as the Rust padding lays them out."""
        ids = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        total = int(lengths.sum())
        width = int(lengths.max()) if len(ids) else 0
        if multiple and width % multiple:
            width += multiple - width % multiple
        mask = np.arange(width)[None, :] < lengths[:, None]
        input_ids = np.full((len(ids), width), self.pad_token_id, dtype=np.int64)
        input_ids[mask] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=total)
        types = np.zeros_like(input_ids)
        if pairs:
            flat = itertools.chain.from_iterable(e.type_ids for e in encodings)
            types[mask] = np.fromiter(flat, dtype=np.int64, count=total)
        return {"input_ids": input_ids, "token_type_ids": types, "attention_mask": mask.astype(np.int64)}

    def _arrays(self, encodings: list[Encoding], pairs: bool) -> dict[str, Any]:
        ids = [e.ids for e in encodings]
        if len({len(x) for x in ids}) > 1:
            raise ValueError("sequences have different lengths: pass padding=True to build tensors")
        input_ids = np.array(ids, dtype=np.int64).reshape(len(ids), -1)
        return {
            "input_ids": input_ids,
            # single texts: segment 0 everywhere, padding included (no need to read it back from Rust)
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64).reshape(
                input_ids.shape
            )
            if pairs
            else np.zeros_like(input_ids),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64).reshape(
                input_ids.shape
            ),
        }


def _word_limit(value: Any, path: Path) -> int:
    """A file's ``max_input_chars_per_word``: an integer >= 1 (-1 or 0 would turn every word into [UNK])."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{path}: max_input_chars_per_word must be an integer >= 1, got {value!r}")
    return value


# ---------------------------------------------------------------- byte-level BPE (ModernBERT's)
# role -> names tried in order when the configs do not name the token
_DEFAULT_NAMES = {
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "pad": ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
}
_WORD = re.compile(r"\S+")


def end_of_words(text: str, n: int) -> int | None:
    """Where the ``n``-th whitespace-separated word of ``text`` ends, when more words follow; else None.

    Cutting ``text`` there keeps every pre-tokenizer piece before it whole (pieces never run from a word
    across the whitespace after it), so the cut text's tokens are the first tokens of the whole text."""
    end = None
    for i, m in enumerate(_WORD.finditer(text)):
        if i == n:
            return end
        end = m.end()
    return None


def _token_name(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class BPETokenizer(Tokenizer):
    """:class:`~bertkit.tokenizer.Tokenizer` over a ``tokenizer.json`` the file itself runs (byte-level BPE, or a
    SentencePiece Unigram model); build it with :meth:`from_file` (``Tokenizer.from_pretrained`` does, for a
    folder whose tokenizer.json holds a BPE or Unigram model)."""

    def __init__(self) -> None:
        raise TypeError(
            "build a BPETokenizer with BPETokenizer.from_file(path) or Tokenizer.from_pretrained(dir)"
        )

    @property
    def fast_path(self) -> bool:
        return False  # the cheaper pipeline is BERT's normaliser and pre-tokenizer: not this file's

    @fast_path.setter
    def fast_path(self, on: bool) -> None:
        if on:
            raise ValueError("a BPE tokenizer has no plain-text fast path")

    @classmethod
    def from_file(cls, path: str | os.PathLike, model_max_length: int = 512) -> BPETokenizer:
        """Load ``tokenizer.json`` at ``path``; special tokens and ``model_max_length`` from the
        ``tokenizer_config.json`` beside it when there is one (``model_max_length`` given here wins)."""
        path = Path(path)
        try:
            backend = _RustTokenizer.from_str(path.read_text(encoding="utf-8"))
        except Exception as e:  # the library reports a malformed file as a plain Exception
            raise UserError(f"{path}: not a tokenizer.json the tokenizers library reads ({e})") from None
        config = read_json_object(path.parent / TOKENIZER_CONFIG)
        specials = read_json_object(path.parent / "special_tokens_map.json")
        self = cls.__new__(cls)
        self._config = config
        self._init_backend(backend, config, specials, model_max_length, str(path))
        return self

    def _init_backend(
        self,
        backend: _RustTokenizer,
        config: dict[str, Any],
        specials: dict[str, Any],
        model_max_length: int,
        source: str,
    ) -> None:
        vocab = backend.get_vocab(with_added_tokens=True)
        names: dict[str, str] = {}
        for role, candidates in _DEFAULT_NAMES.items():
            given = _token_name(config.get(f"{role}_token")) or _token_name(specials.get(f"{role}_token"))
            name = given if given is not None else next((c for c in candidates if c in vocab), None)
            if name is None or name not in vocab:
                raise UserError(
                    f"{source}: no {role} token in the vocabulary (looked for "
                    f"{given!r} from {TOKENIZER_CONFIG})"
                    if given is not None
                    else f"{source}: no {role} token in the vocabulary (looked for {', '.join(candidates)}); "
                    f"name it as {role}_token in {TOKENIZER_CONFIG}"
                )
            names[role] = name
        self.vocab = vocab
        size = backend.get_vocab_size(with_added_tokens=True)
        self.ids_to_tokens = [backend.id_to_token(i) or "" for i in range(size)]
        # BERT's normaliser settings, for callers that print them: this file's normaliser is its own
        self.lowercase, self.strip_accents, self.tokenize_chinese_chars = False, None, False
        self.max_input_chars_per_word = 100
        self.model_max_length = model_max_length
        self._set_special_tokens(names)
        self._tok = self._fast_tok = backend  # one pipeline: every text takes it
        self._no_truncation_or_padding()  # set per call, as for WordPiece

    # -------------------------------------------------- cutting long texts (hooks of Tokenizer)
    def _cut_texts(self, texts: Sequence[str], limit: int) -> tuple[Sequence[str], list[int]]:
        """Texts of more than ``limit`` words sliced after their ``limit``-th word (whitespace kept as
        written), and the indices cut."""
        out: list[str] | None = None
        cut: list[int] = []
        for i, text in enumerate(texts):
            if not isinstance(text, str) or len(text) <= 2 * limit:  # too short for limit + 1 words
                continue
            end = end_of_words(text, limit)
            if end is not None:
                if out is None:
                    out = list(texts)
                out[i] = text[:end]
                cut.append(i)
        return (texts if out is None else out), cut

    @staticmethod
    def _widen(text: str, short: str) -> str:
        """``text`` sliced after twice as many words as ``short`` holds (``text`` itself if shorter)."""
        end = end_of_words(text, 2 * max(len(short.split()), 1))
        return text if end is None else text[:end]

    def _count_tokens(self, text: str, words: int = 4096) -> int:
        """The token count of a long text, ``words`` words at a time, each piece sliced where whitespace
        starts (a piece boundary), so the sum is the whole text's count and memory stays bounded."""
        n = 0
        while text:
            end = end_of_words(text, words)
            head, text = (text, "") if end is None else (text[:end], text[end:])
            n += self._ntokens(head)
        return n

    # ------------------------------------------------------------------------ persistence
    def save_pretrained(self, model_dir: str | os.PathLike) -> None:
        """Write ``tokenizer.json`` as loaded, ``tokenizer_config.json`` (the loaded one's keys kept, the special
        tokens and length updated) and ``special_tokens_map.json``: a folder transformers' AutoTokenizer reads."""
        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        self._no_truncation_or_padding()
        specials = self._special_tokens_map(("unk", "cls", "sep", "pad", "mask"))
        config = dict(self._config)
        config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
        for key, name in specials.items():  # an entry naming the same token keeps its flags (lstrip, ...)
            if _token_name(config.get(key)) != name:
                config[key] = name
        config["model_max_length"] = self.model_max_length
        with atomic_write(model_dir / TOKENIZER_JSON) as f:
            f.write(self._tok.to_str())
        atomic_write_json(model_dir / TOKENIZER_CONFIG, config)
        atomic_write_json(model_dir / "special_tokens_map.json", specials)
