"""Several runners on one matrix: a lock file per cell, so each cell runs once, and waiting on another
runner's cell.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from lab.experiment.matrix import Cell
from lab.experiment.paths import artifact
from lab.experiment.results import read_results

POLL_OTHER_RUNNERS_S = 5.0  # how often a runner waiting on another runner's cell looks for its result


def _lock_path(out: Path, cell: Cell) -> Path:
    return out / "locks" / cell.result_name.replace(".json", ".lock")


# a lock's file time and a process's start time come from two clocks (the file system's, the kernel's boot
# time plus ticks, whole seconds): a process that started this much after a lock was written is not its writer
START_SLACK_S = 2.0


def _started(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (``/proc/PID/stat`` field 22, ticks since
    boot, plus the boot time); None where that cannot be read (no /proc, the process just ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # fields after "(comm)" start at field 3
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _holder(path: Path) -> int | None:
    """The id of the live process that holds the lock file ``path``, else None (no file, or a dead one's);
    0 for an empty lock written moments ago (its writer creates it, then writes its id: it holds it).

    A lock holds its writer's process id alone (so runners of every version read each other's locks); its
    writer is the process of that id only if that process had started by the time the file was written: an
    id the system has since given to a later process (a reboot, a long run) holds nothing."""
    try:
        written = path.stat().st_mtime
        text = path.read_text()
        if not text.strip():  # its writer is between creating and writing it, or died there
            return 0 if time.time() - written < START_SLACK_S else None
        pid = int(text)
        if pid <= 0:  # kill(0) would signal our own group
            return None
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, FileNotFoundError):
        return None
    except PermissionError:  # alive, another user's
        pass
    started = _started(pid)
    if started is not None and started > written + START_SLACK_S:  # the id was reused after the lock
        return None
    return pid


def _drop_if_stale(path: Path) -> None:
    """Delete the lock file ``path`` if no live process holds it. Two runners that both found it stale must
    not both take it over (the second would delete the first one's new lock): the check and the deletion
    happen under one lock on the folder's ``.takeover`` file."""
    import fcntl

    with open(path.parent / ".takeover", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # let go when the file closes
        if _holder(path) is None:
            path.unlink(missing_ok=True)


def claim_cell(out: Path, cell: Cell) -> Path | None:
    """``OUT/locks/<cell>.lock`` holding this process id, or None when a live process holds it (two runners
    on one matrix share the work instead of doing a cell twice). A lock of a dead process is taken over."""
    path = _lock_path(out, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _holder(path) is not None:
                return None
            _drop_if_stale(path)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return path
    return None


def held_elsewhere(out: Path, cell: Cell) -> bool:
    """Whether a live process other than this one holds ``cell``'s lock."""
    return _holder(_lock_path(out, cell)) not in (None, os.getpid())


def wait_for_other_runners(
    elsewhere: dict[str, Cell], out: Path, res_dir: Path, done: dict[str, Any]
) -> list[Cell]:
    """Block until a cell another runner holds is over: its lock was let go (a runner writes the result file
    before it lets go). Returns those this runner must try itself: without a result file, or rebuilds whose
    output is still missing (that runner failed or was killed); all leave ``elsewhere``. A rebuild's result
    file is there from the start, so only the lock tells whether its output is ready."""

    def unfinished(c: Cell) -> bool:
        output = artifact(c, out)
        return c.name not in done or (output is not None and not output.exists())

    while True:
        over = [c for c in elsewhere.values() if not held_elsewhere(out, c)]
        if over:
            done.update(read_results(res_dir))
            for c in over:
                del elsewhere[c.name]
            return [c for c in over if unfinished(c)]
        time.sleep(POLL_OTHER_RUNNERS_S)
