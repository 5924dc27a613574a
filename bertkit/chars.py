"""BERT's character classes, as the original release's ``tokenization.py`` defines them: what its basic
tokenisation drops (control), turns into spaces (whitespace), splits off (punctuation) and spaces out (CJK
ideographs). Used where bertkit re-does that tokenisation in Python (SQuAD's answer text) or must agree with
it (the vocabulary trainer's in-word characters)."""

from __future__ import annotations

import unicodedata

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def is_punctuation(ch: str) -> bool:
    """ASCII symbols count as punctuation too (``$``, ``^``, `````), as in the original."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(cp: int) -> bool:
    """Whether code point ``cp`` is a CJK ideograph (the original's ranges)."""
    return cp >= 0x3400 and any(lo <= cp <= hi for lo, hi in _CJK_RANGES)
