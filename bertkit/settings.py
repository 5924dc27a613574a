"""Every ``BERTKIT_*`` environment variable: its name, values, default, meaning and parsing, in one place.

The rest of the package asks the functions below and never reads these variables itself. Each is read when
its function is called (at the moment the setting is used, so a test may change ``os.environ`` in between),
except ``BERTKIT_KERNELS``, read once when :mod:`bertkit.kernels` is imported. An unset or empty variable
takes its default; a value outside those listed is a :class:`~bertkit.errors.UserError` of one line naming
the variable. Flags take ``0|1`` (also ``false|true``, ``no|yes``, ``off|on``, any case).

================================  ===========  ===============  ===============================================
Variable                          Values       Default          Meaning
================================  ===========  ===============  ===============================================
``BERTKIT_KERNELS``               flag         1                bertkit's CPU kernels (0: the plain PyTorch
                                                                reference ops; :mod:`bertkit.kernels`)
``BERTKIT_ONEDNN``                flag         measured         fp32 GEMM backend: 1 oneDNN, 0 torch's
                                                                ``F.linear`` (:mod:`bertkit.kernels.gemm`)
``BERTKIT_TOKENIZER_FAST_PATH``   flag         measured         the tokenizer's plain-text pipeline
                                                                (:mod:`bertkit.tokenizer_fast_path`)
``BERTKIT_PRECISION``             fp32|bf16    measured         what training's ``--precision auto`` takes
                                                                (:mod:`bertkit.train.precision`)
``BERTKIT_INFERENCE_PRECISION``   fp32|bf16    measured         what inference's ``--precision auto`` takes
                                                                (:mod:`bertkit.inference_precision`)
``BERTKIT_BF16_ATTENTION``        fp32|bf16    measured         how attention on bf16 inputs runs on the CPU
                                                                (:mod:`bertkit.kernels.attention`)
``BERTKIT_CACHE_DIR``             path         see meaning      where the per-machine choices are cached
                                                                (else ``$XDG_CACHE_HOME/bertkit``, else
                                                                ``~/.cache/bertkit``; :mod:`bertkit.tuning`)
``BERTKIT_CHOICE_CACHE``          flag         1                use that cache (0: measure afresh, write
                                                                nothing)
``BERTKIT_KEEP_FREED_MEMORY``     flag         1                keep freed memory in the process while
                                                                training (:mod:`bertkit.kernels.freed_memory`)
``BERTKIT_API_KEY``               token        see meaning      the bearer key ``bertkit serve`` requires when
                                                                ``--api-key`` is not given (unset: no key);
                                                                kept out of the process list
================================  ===========  ===============  ===============================================

"measured": unset, the choice is measured once per machine and cached (``bertkit tune``, else at first use:
:func:`bertkit.tuning.choose`); set, it overrides the measurement.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from .errors import UserError

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: ``parse`` turns its text into a value or raises ValueError, whose message
    (what the value may be) follows the variable's name in the one-line UserError."""

    name: str
    parse: Callable[[str], T]
    default: T | None = None

    def raw(self) -> str | None:
        """The variable's text, None when unset, empty or blank."""
        value = os.environ.get(self.name, "")
        return value if value.strip() else None

    def value(self) -> T | None:
        """The parsed value, or ``default`` when unset."""
        raw = self.raw()
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as e:
            raise UserError(f"{self.name} must be {e}, got {raw!r}") from None


def parse_flag(text: str) -> bool:
    """``0|1`` (or false/true, no/yes, off/on, any case) as a bool."""
    low = text.strip().lower()
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise ValueError("0 or 1")


def flag_choice(off: str, on: str) -> Callable[[str], str]:
    """A flag whose 0 means the choice ``off`` and 1 the choice ``on``."""
    return lambda text: on if parse_flag(text) else off


def one_of(*values: str) -> Callable[[str], str]:
    """A value that must be one of ``values``."""

    def parse(text: str) -> str:
        if text.strip() not in values:
            raise ValueError(" or ".join(values))
        return text.strip()

    return parse


def bearer_token(text: str) -> str:
    """A key as the ``Authorization: Bearer`` header carries it: printable ASCII, no spaces."""
    if not text.isascii() or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError("printable ASCII without spaces")
    return text


KERNELS = Setting("BERTKIT_KERNELS", parse_flag, default=True)
ONEDNN = Setting("BERTKIT_ONEDNN", flag_choice("torch", "onednn"))
TOKENIZER_FAST_PATH = Setting("BERTKIT_TOKENIZER_FAST_PATH", flag_choice("off", "on"))
PRECISION = Setting("BERTKIT_PRECISION", one_of("fp32", "bf16"))
INFERENCE_PRECISION = Setting("BERTKIT_INFERENCE_PRECISION", one_of("fp32", "bf16"))
BF16_ATTENTION = Setting("BERTKIT_BF16_ATTENTION", one_of("fp32", "bf16"))
CACHE_DIR = Setting("BERTKIT_CACHE_DIR", Path)
CHOICE_CACHE = Setting("BERTKIT_CHOICE_CACHE", parse_flag, default=True)
KEEP_FREED_MEMORY = Setting("BERTKIT_KEEP_FREED_MEMORY", parse_flag, default=True)
API_KEY = Setting("BERTKIT_API_KEY", bearer_token)

ALL: tuple[Setting, ...] = (
    KERNELS,
    ONEDNN,
    TOKENIZER_FAST_PATH,
    PRECISION,
    INFERENCE_PRECISION,
    BF16_ATTENTION,
    CACHE_DIR,
    CHOICE_CACHE,
    KEEP_FREED_MEMORY,
    API_KEY,
)


def check_all() -> None:
    """Read every setting once, so a bad value stops a command at its start in one line (UserError), before
    it reaches the module that reads it, which a command that never imports torch would not load."""
    for setting in ALL:
        setting.value()


def kernels_enabled() -> bool:
    """Whether bertkit's CPU kernels start on (read once, when :mod:`bertkit.kernels` is imported)."""
    return bool(KERNELS.value())


def gemm_backend_override() -> str | None:
    """The fp32 GEMM backend the user pinned, "onednn" or "torch"; None: chosen per machine."""
    return ONEDNN.value()


def cache_dir_override() -> Path | None:
    """The folder the user named for the per-machine choices; None: the XDG default."""
    return CACHE_DIR.value()


def choice_cache_enabled() -> bool:
    """Whether per-machine choices are read from and written to the cache."""
    return bool(CHOICE_CACHE.value())


def keep_freed_memory_enabled() -> bool:
    """Whether the trainer may keep freed memory in the process."""
    return bool(KEEP_FREED_MEMORY.value())


def api_key() -> str | None:
    """The key ``bertkit serve`` requires when its ``--api-key`` flag is not given; None: no key."""
    return API_KEY.value()
