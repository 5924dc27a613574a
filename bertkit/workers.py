"""Worker processes: no more than can help, and none that outlive the process that started them.

Why: ``ProcessPoolExecutor`` with the fork start method starts every worker it was asked for at once, so a
mistyped ``--workers 100000`` forked thousands of processes; and a worker whose parent was killed kept
running (and holding memory) until it finished its task or forever.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

logger = logging.getLogger("bertkit")

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def clamp_workers(requested: int, tasks: int, flag: str = "--workers") -> int:
    """``min(requested, usable CPUs, tasks)``, at least 1; says so in the log when it is fewer than asked."""
    cpus = usable_cpus()
    n = max(1, min(requested, cpus, tasks))
    if n < requested:
        logger.warning(
            "%s %d: using %d worker processes (%d usable CPUs, %d tasks)", flag, requested, n, cpus, tasks
        )
    return n


def die_with_parent(parent_pid: int) -> None:
    """Call first thing in a worker: the kernel sends it SIGKILL when its parent exits (Linux), and a worker
    whose parent is already gone exits at once. Elsewhere the pool's own shutdown is all there is."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect: no signal will come
        os._exit(1)
