"""Keep freed memory in the process during training instead of handing it back to the OS every step.

A training step allocates and frees the same large blocks every step (activations, their gradients, the
word-embedding gradient: tens of MB each at BERT-base). glibc's malloc serves blocks above its mmap threshold
with a fresh ``mmap`` and unmaps them on ``free``, so every step faults its memory in again page by page (the
kernel zeroes each 4 KiB page). Measured side by side in ``docs/perf/freed-memory.json``
(``python -m benchmarks.bench_freed_memory``; notes in lab/notes/notes-perf.md). This is work bertkit
does not need to do on any CPU vendor, not a vendor-specific kernel.

:func:`keep_freed_memory` tells glibc (through ``mallopt``) to serve large blocks from the heap too and never
to trim the heap's top, so freed blocks are reused by the next step. The cost: resident memory stays at its
high-water mark until the process exits, and that mark is higher (an aligned block that does not fit a freed
hole grows the heap), flat after the first steps; the same file records it. The Trainer calls it at
the start of ``fit``; a setting in the environment turns it off (:mod:`bertkit.settings`). Elsewhere than
glibc (macOS, musl, Windows) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

from .. import settings

logger = logging.getLogger("bertkit")

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_NEVER = 2**31 - 1  # the largest value mallopt's int takes: 2 GiB of free heap top kept before trimming

_lock = threading.Lock()
_state: dict[str, bool] = {}


def _glibc():
    """glibc's handle, or None on another C library."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):  # not glibc (musl and macOS have no gnu_get_libc_version)
        return None
    return libc


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (see the module docstring); returns whether it is in effect.
    Idempotent and thread-safe; logs the decision once."""
    with _lock:
        if "applied" in _state:
            return _state["applied"]
        applied, why = False, ""
        if not settings.keep_freed_memory_enabled():
            why = f"{settings.KEEP_FREED_MEMORY.name}={settings.KEEP_FREED_MEMORY.raw()}"
        else:
            libc = _glibc()
            if libc is None:
                why = "not glibc"
            else:
                # no mmap for large blocks (they come from the heap and are reused), no trimming of the top
                applied = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(
                    libc.mallopt(M_TRIM_THRESHOLD, TRIM_NEVER)
                )
                why = "mallopt" if applied else "mallopt refused"
        _state["applied"] = applied
        logger.info("freed memory kept in the process for reuse: %s (%s)", "yes" if applied else "no", why)
        return applied
