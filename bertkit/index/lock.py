"""One writer at a time per index folder: an exclusive ``flock`` on ``INDEX_DIR/writer.lock``.

Why a lock rather than SQLite's own: each writer keeps an in-memory backend and snapshots it when it is done,
dropping the log entries the snapshot covers. Two writers interleaving their batches would each snapshot a
backend that lacks the other's rows and truncate the log that held them. The kernel releases a ``flock``
when its holder exits, killed or not, so a crashed writer never leaves the index locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from ..errors import UserError

LOCK_NAME = "writer.lock"


def acquire(index_dir: Path, timeout: float, poll: float = 0.05) -> int:
    """Hold the index's writer lock; waits up to ``timeout`` seconds for another writer to finish, then
    refuses in one line. Returns the file descriptor to pass to :func:`release`."""
    path = Path(index_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)  # the umask applies
    except OSError as e:
        raise UserError(f"{path}: cannot open the index's writer lock ({e.strerror})") from None
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise UserError(
                    f"{index_dir}: another process is writing to this index (waited {timeout:g} s for "
                    f"{LOCK_NAME}); retry when it has finished, or raise --lock-timeout"
                ) from None
            time.sleep(poll)


def release(fd: int | None) -> None:
    """Give the lock back (closing the descriptor releases the ``flock``)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
