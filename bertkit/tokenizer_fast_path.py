"""A cheaper normaliser and pre-tokenizer that give exactly the BERT pipeline's result on "plain" text.

Why: on long text nearly all of the tokenizer's time is spent in Rust, most of it in two stages that do
Unicode work that plain text does not need. ``BertNormalizer`` removes control characters, maps
whitespace, spaces out CJK characters, decomposes (NFD) and strips accents, then lowercases; for a
character that none of these steps change apart from lowercasing, a bare ``Lowercase`` normaliser (or
none, for cased models) yields the same normalised text with the same character alignments.
``BertPreTokenizer`` splits on whitespace and then again on punctuation, two passes that each build
new substrings; one ``Split`` by a regular expression that matches "a run of word characters or one
punctuation character" produces the same pieces in one pass.

Which characters are plain is not assumed but measured, once per normaliser setting, by running the
library's own ``BertNormalizer`` and ``BertPreTokenizer`` on every candidate character: a character is
plain when the full normaliser gives what the cheap one gives (one character, so offsets line up), or
maps it to a space that the pre-tokenizer drops either way (tab, newline, carriage return). The
pre-tokenizer then says whether its normalised form is whitespace, punctuation or part of a word, and
the regular expression's character classes are built from exactly those answers. A text goes through
the cheap pipeline only when every one of its characters is plain; anything else (accented letters of
an uncased model, control characters, CJK, combining marks, characters outside the candidate blocks)
takes the full pipeline.

Candidates: ASCII, Latin-1 and Latin Extended-A/B, and the punctuation and symbol blocks
U+2000-U+2BFF (dashes, quotes, primes, currency, arrows, maths), which covers nearly all English text.

Also here: :func:`cut_texts`, which skips tokenizing text past a truncation window (finer for plain
text, whose pre-tokenizer pieces this module can count).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tokenizers import Regex, normalizers, pre_tokenizers

# Inclusive code point ranges considered for the fast path (see the module docstring).
CANDIDATE_RANGES = ((0x09, 0x0D), (0x20, 0x7E), (0xA0, 0x24F), (0x2000, 0x2BFF))


@dataclass(frozen=True)
class PlainText:
    """What the fast path needs for one normaliser setting.

    Attributes:
        unsafe: matches any character that is not plain; a text with no match may take the fast path.
        split_pattern: Oniguruma pattern for ``pre_tokenizers.Split(..., invert=True)``: a run of word
            characters or a single punctuation character, both as they are after normalisation.
        piece_pattern: the same as a Python pattern over the input characters (before normalisation),
            with the whitespace that may precede a piece: one match is one pre-tokenizer piece.
    """

    unsafe: re.Pattern[str]
    split_pattern: str
    piece_pattern: str

    def is_plain(self, text: str) -> bool:
        """True when every character of ``text`` is plain (raises TypeError for a non-str)."""
        return self.unsafe.search(text) is None

    @functools.cache  # noqa: B019 (instances are few and cached for the process's life anyway)
    def first_pieces(self, n: int) -> re.Pattern[str]:
        """Matches the first ``n`` pre-tokenizer pieces of a plain text (no match: it has fewer).

        Each piece gives at least one token (an unknown word gives ``[UNK]``), so a plain text cut after
        its ``n``-th piece still yields at least ``n`` tokens, and they are the whole text's first
        tokens. The quantifiers are possessive and the group atomic: a text with fewer pieces fails in
        linear time instead of backtracking through every way to split a word.
        """
        return re.compile(f"(?>(?:{self.piece_pattern}){{{n}}})")


def _ranges(chars: Iterable[str]) -> list[tuple[int, int]]:
    """Sorted characters -> maximal inclusive code point ranges."""
    out: list[tuple[int, int]] = []
    for cp in sorted(map(ord, chars)):
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def _char_class(chars: Iterable[str], esc: Callable[[int], str], negate: bool = False) -> str:
    """A character class of ``chars``, each code point written by ``esc``."""
    body = "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in _ranges(chars))
    return f"[{'^' if negate else ''}{body}]"


def _python_class(chars: Iterable[str], negate: bool = False) -> str:
    """A Python ``re`` character class of ``chars`` written with \\uXXXX / \\UXXXXXXXX escapes."""
    return _char_class(chars, lambda cp: f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}", negate)


def _onig_class(chars: Iterable[str]) -> str:
    """An Oniguruma character class of ``chars`` written with \\x{HHHH} escapes."""
    return _char_class(chars, lambda cp: f"\\x{{{cp:x}}}")


def fast_normalizer(lowercase: bool) -> normalizers.Normalizer | None:
    """The cheap normaliser: lowercasing for uncased models, nothing for cased ones."""
    return normalizers.Lowercase() if lowercase else None


@functools.lru_cache(maxsize=16)
def plain_text(lowercase: bool, strip_accents: bool | None, tokenize_chinese_chars: bool) -> PlainText:
    """Measure which characters the cheap pipeline handles exactly as the full one (cached: ~10 ms)."""
    full = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=tokenize_chinese_chars,
        strip_accents=strip_accents,
        lowercase=lowercase,
    )
    cheap = fast_normalizer(lowercase)
    pre = pre_tokenizers.BertPreTokenizer()
    word: set[str] = set()  # normalised characters, for the Rust pre-tokenizer
    punct: set[str] = set()
    word_in: set[str] = set()  # the same classes over the input characters, for Python patterns
    punct_in: set[str] = set()
    space_in: set[str] = set()
    for lo, hi in CANDIDATE_RANGES:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            # Marks combine with their neighbours under NFD (reordering, accent stripping), so their
            # effect depends on context that a one-character probe cannot see: never plain.
            if unicodedata.category(c).startswith("M") or unicodedata.combining(c):
                continue
            want = full.normalize_str(c)
            got = cheap.normalize_str(c) if cheap is not None else c
            if len(got) != 1:
                continue
            pieces = [p for p, _ in pre.pre_tokenize_str(f"a{got}a")]
            if want == got:
                if pieces == ["a", "a"]:
                    space_in.add(c)  # whitespace: dropped by both pre-tokenizers
                elif pieces == ["a", got, "a"]:
                    punct.add(got)
                    punct_in.add(c)
                elif pieces == [f"a{got}a"]:
                    word.add(got)
                    word_in.add(c)
            elif want == " " and pieces == ["a", "a"]:
                space_in.add(c)  # whitespace the full normaliser turns into a space; dropped either way
    if word & punct:  # cannot happen (the classification is by normalised character); guard anyway
        raise AssertionError(f"characters classed as both word and punctuation: {sorted(word & punct)}")
    return PlainText(
        unsafe=re.compile(_python_class(space_in | punct_in | word_in, negate=True)),
        split_pattern=f"{_onig_class(word)}+|{_onig_class(punct)}",
        piece_pattern=f"{_python_class(space_in)}*+(?:{_python_class(word_in)}++|{_python_class(punct_in)})",
    )


def fast_pre_tokenizer(plain: PlainText) -> pre_tokenizers.PreTokenizer:
    """One-pass pre-tokenizer equal to ``BertPreTokenizer`` on plain text: keep each regex match (a word
    or one punctuation character) as a piece and drop what lies between (whitespace)."""
    return pre_tokenizers.Split(Regex(plain.split_pattern), behavior="removed", invert=True)


def cut_texts(
    texts: Sequence[str], limit: int, plain: PlainText | None, n_special: int = 2
) -> tuple[Sequence[str], list[int]]:
    """Texts cut short where their tail cannot reach a ``limit``-token window, and the indices cut.

    Tokens never span whitespace, so a text cut after its ``limit``-th whitespace-separated word yields
    the whole text's first tokens, at least ``limit`` of them unless some words vanish in normalisation
    (the caller detects a short encoding and redoes the whole text); truncation to ``limit`` then gives
    exactly what the whole text gives, without tokenizing what is cut away. A plain text (``plain``
    given; no ``[``, so no special token written in it) is cut finer, after its ``limit - n_special``-th
    pre-tokenizer piece: a word with punctuation attached is several pieces, so this cuts ~12% fewer
    tokens on WikiText, and plain pieces never vanish.
    """
    out: list[str] | None = None
    cut: list[int] = []
    min_chars = 2 * limit  # a text this short has at most `limit` words
    n_pieces = max(limit - n_special, 1)
    first_pieces = plain.first_pieces(n_pieces).match if plain is not None else None
    for i, text in enumerate(texts):
        if not isinstance(text, str) or len(text) <= n_pieces:
            continue
        short = None
        if first_pieces is not None and "[" not in text and plain.is_plain(text):
            m = first_pieces(text)
            if m is not None and m.end() < len(text):
                short = text[: m.end()]
        elif len(text) > min_chars:
            words = text.split(None, limit)
            if len(words) > limit:
                short = " ".join(words[:limit])
        if short is not None:
            if out is None:
                out = list(texts)
            out[i] = short
            cut.append(i)
    return (texts if out is None else out), cut


def decide_fast_path(full, fast, vocab: Sequence[str], force: bool = False) -> tuple[str, str]:
    """Whether the plain-text pipeline ``fast`` beats the full one ``full`` (two ``tokenizers.Tokenizer``
    configured alike) on this machine, ``"on"`` or ``"off"``, and where that came from
    (:func:`bertkit.tuning.decide`; ``force``: measured again). Measured once on ~300 plain sentences made of
    ``vocab``'s whole words (deterministic), cached with the other per-machine choices (:mod:`bertkit.tuning`);
    an environment variable overrides it (:mod:`bertkit.settings`). Both pipelines give the same output
    (tested), so the choice is speed only."""
    import random

    from .settings import TOKENIZER_FAST_PATH
    from .tuning import decide, time_alternating

    def measure() -> tuple[str, dict]:
        words = [w for w in vocab if w.isalpha() and w.isascii() and len(w) > 1] or ["plain", "text"]
        rng = random.Random(0)
        texts = [
            " ".join(rng.choices(words, k=24)).capitalize() + ", " + rng.choice(words) + "."
            for _ in range(300)
        ]
        t = time_alternating(
            {"fast": lambda: fast.encode_batch(texts), "full": lambda: full.encode_batch(texts)}, rounds=5
        )
        choice = "on" if t["fast"] < t["full"] else "off"
        return choice, {k: round(v * 1e3, 3) for k, v in t.items()} | {"unit": "ms per 300 sentences"}

    return decide("tokenizer_fast_path", measure, override=TOKENIZER_FAST_PATH, force=force)
