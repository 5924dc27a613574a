"""A ``tokenizer.json`` whose model is BPE (ModernBERT's byte-level BPE), behind :class:`bertkit.tokenizer.Tokenizer`'s
interface: same calls, same outputs' layout, ids equal transformers' ``PreTrainedTokenizerFast`` on the folder.

The file is run as it is written: its normaliser, pre-tokenizer, BPE merges, post-processor (ModernBERT's
``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``), added tokens (``[MASK]`` with its left-strip) and decoder. Only
the five special tokens are looked up, by the names ``tokenizer_config.json`` (or ``special_tokens_map.json``)
gives, else by BERT's and RoBERTa's usual names.

What differs from WordPiece inside the shared code: byte-level tokens carry their whitespace (``" word"``,
``"\\n\\n"``), so a long text is cut for truncation by slicing the original text after a word, never by
re-joining words with single spaces; and the cheaper plain-text pipeline (BERT's normaliser) is never used.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _RustTokenizer

from .errors import UserError
from .io import atomic_write, atomic_write_json
from .tokenizer import TOKENIZER_CONFIG, TOKENIZER_JSON, Tokenizer

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


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _token_name(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class BPETokenizer(Tokenizer):
    """:class:`~bertkit.tokenizer.Tokenizer` over a BPE ``tokenizer.json``; build it with :meth:`from_file`
    (``Tokenizer.from_pretrained`` does, for a folder whose tokenizer.json holds a BPE model)."""

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
        backend.no_truncation()  # set per call, as for WordPiece
        backend.no_padding()
        config = _read_json(path.parent / TOKENIZER_CONFIG)
        specials = _read_json(path.parent / "special_tokens_map.json")
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
        self.unk_token, self.cls_token, self.sep_token, self.pad_token, self.mask_token = (
            names[k] for k in ("unk", "cls", "sep", "pad", "mask")
        )
        self.unk_token_id, self.cls_token_id, self.sep_token_id, self.pad_token_id, self.mask_token_id = (
            vocab[names[k]] for k in ("unk", "cls", "sep", "pad", "mask")
        )
        self.all_special_ids = sorted({vocab[n] for n in names.values()})
        self._tok = self._fast_tok = backend  # one pipeline: every text takes it
        self._pad_longest = False

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
        self._tok.no_truncation()
        self._tok.no_padding()
        self._pad_longest = False
        specials = {
            f"{role}_token": getattr(self, f"{role}_token") for role in ("unk", "cls", "sep", "pad", "mask")
        }
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


__all__ = ["BPETokenizer", "end_of_words"]
