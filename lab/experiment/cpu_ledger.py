"""The CPU and wall seconds a cell has used over all its sittings.

A fine-tuning cell that was stopped or killed resumes from its last checkpoint in a later sitting; its result
must still count the seconds the earlier sittings spent, or the study's CPU-hours come out short. The ledger
keeps the running totals in a small JSON file beside the run, rewritten every few seconds and on exit.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from bertkit.io import atomic_write_json


class CpuLedger:
    """``with CpuLedger(path) as ledger: ...``; then :meth:`totals`. The totals start from what ``path`` holds
    (the earlier sittings) and add this process's CPU seconds (all its threads) and the wall seconds since
    entering. A daemon thread rewrites ``path`` every ``every`` seconds, so a SIGKILL loses at most that much
    of the count; leaving the block, by an exception too, writes it once more."""

    def __init__(self, path: Path, every: float = 30.0) -> None:
        self.path = Path(path)
        self.every = every
        saved = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
        self.before = (float(saved.get("cpu_s", 0.0)), float(saved.get("wall_s", 0.0)))
        self.sittings = int(saved.get("sittings", 0)) + 1
        self._start = (time.process_time(), time.time())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def totals(self) -> tuple[float, float]:
        """(CPU seconds, wall seconds) over every sitting so far, rounded to 0.1 s."""
        cpu = self.before[0] + time.process_time() - self._start[0]
        wall = self.before[1] + time.time() - self._start[1]
        return round(cpu, 1), round(wall, 1)

    def _write(self) -> None:
        cpu, wall = self.totals()
        atomic_write_json(self.path, {"cpu_s": cpu, "wall_s": wall, "sittings": self.sittings})

    def _keep_writing(self) -> None:
        while not self._stop.wait(self.every):
            self._write()

    def __enter__(self) -> CpuLedger:
        self._start = (time.process_time(), time.time())
        self._write()
        self._thread = threading.Thread(target=self._keep_writing, name="cpu-ledger", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._write()
