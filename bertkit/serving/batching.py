"""Cross-request dynamic batching: one queue, N model workers.

A request hands the batcher its sequences (token ids, already tokenised and checked) and blocks until all
have come back. A free worker takes what is queued at once (``max_wait_ms=0``, the default: requests that
arrive while a batch runs form the next batch, so a busy server batches and an idle one adds no latency),
or waits until the queue holds ``max_batch_tokens`` worth of work or the oldest sequence has waited
``max_wait_ms``. A batch holds:

- only sequences of one task (one kind of model call), the task of the oldest waiting request;
- round-robin over the waiting requests, one sequence from each in turn, so a request with many or long
  sequences cannot starve a small one that arrived after it (the small one rides in the next batch);
- bounded by the token budget counted as the padded size (rows x longest row), at least one sequence;
- sorted by length before the forward, outputs handed back to each request in its own order.

``enabled=False`` keeps one request per batch (the unbatched baseline, same code path otherwise).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# run(task, ids, type_ids) -> one output per sequence (same order)
RunFn = Callable[[str, list[list[int]], list[list[int]]], list[Any]]


@dataclass
class _Request:
    task: str
    ids: Sequence[list[int]]
    type_ids: Sequence[list[int]]
    arrived: float
    next: int = 0  # next sequence to hand to a batch
    done: int = 0
    results: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    event: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Merge concurrent requests' sequences into token-bounded batches run by ``workers`` threads."""

    def __init__(
        self,
        run: RunFn,
        max_batch_tokens: int = 16_384,
        max_wait_ms: float = 0.0,
        workers: int = 1,
        enabled: bool = True,
        on_batch: Callable[[str, int, int], None] | None = None,
    ) -> None:
        if max_batch_tokens < 1 or workers < 1 or max_wait_ms < 0:
            raise ValueError("max_batch_tokens and workers must be >= 1, max_wait_ms >= 0")
        self.run = run
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.enabled = enabled
        self.on_batch = on_batch
        self._cond = threading.Condition()
        self._waiting: list[_Request] = []  # arrival order
        self._closed = False
        self._threads = [
            threading.Thread(target=self._worker, name=f"bertkit-batcher-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ client side
    def submit(
        self, task: str, ids: Sequence[list[int]], type_ids: Sequence[list[int]] | None = None
    ) -> list[Any]:
        """Run ``ids`` (each a list of token ids) as ``task``; blocks; outputs in the same order."""
        if not ids:
            return []
        if type_ids is None:
            type_ids = [[0] * len(x) for x in ids]
        req = _Request(task, ids, type_ids, time.monotonic(), results=[None] * len(ids))
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._waiting.append(req)
            self._cond.notify_all()
        req.event.wait()
        if req.error is not None:
            raise req.error
        return req.results

    def queue_depth(self) -> int:
        """Sequences waiting for a batch."""
        with self._cond:
            return sum(len(r.ids) - r.next for r in self._waiting)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)

    # ------------------------------------------------------------------ worker side
    def _ready(self, now: float) -> bool:
        if not self._waiting:
            return False
        if not self.enabled or self.max_wait == 0:
            return True
        if now - self._waiting[0].arrived >= self.max_wait:
            return True
        task = self._waiting[0].task
        tokens = sum(len(x) for r in self._waiting if r.task == task for x in r.ids[r.next :])
        return tokens >= self.max_batch_tokens

    def _take(self) -> tuple[str, list[tuple[_Request, int]]]:
        """Pick the next batch (called with the lock held, the queue not empty)."""
        task = self._waiting[0].task
        pool = [r for r in self._waiting if r.task == task]
        if not self.enabled:
            pool = pool[:1]
        picked: list[tuple[_Request, int]] = []
        longest = 0
        for r in itertools.cycle(pool):
            if all(q.next >= len(q.ids) for q in pool):
                break
            if r.next >= len(r.ids):
                continue
            n = len(r.ids[r.next])
            if picked and max(longest, n) * (len(picked) + 1) > self.max_batch_tokens:
                break
            picked.append((r, r.next))
            longest = max(longest, n)
            r.next += 1
        self._waiting = [r for r in self._waiting if r.next < len(r.ids)]
        return task, picked

    def _worker(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = time.monotonic()
                    if self._ready(now):
                        break
                    timeout = None
                    if self._waiting:
                        timeout = max(self._waiting[0].arrived + self.max_wait - now, 0.0005)
                    self._cond.wait(timeout)
                task, picked = self._take()
            picked.sort(key=lambda p: len(p[0].ids[p[1]]))
            try:
                outputs = self.run(task, [r.ids[i] for r, i in picked], [r.type_ids[i] for r, i in picked])
                error = None
            except BaseException as e:  # handed to the waiting requests; the worker lives on
                outputs, error = [None] * len(picked), e
            if self.on_batch is not None:
                longest = max(len(r.ids[i]) for r, i in picked)
                self.on_batch(task, len(picked), longest * len(picked))
            with self._cond:
                for (r, i), out in zip(picked, outputs):
                    if r.event.is_set():  # already failed through another batch
                        continue
                    if error is not None:  # fail the request; what it still has waiting is dropped
                        r.error, r.next = error, len(r.ids)
                        r.event.set()
                        continue
                    r.results[i] = out
                    r.done += 1
                    if r.done == len(r.ids):
                        r.event.set()
                self._waiting = [q for q in self._waiting if q.next < len(q.ids)]


__all__ = ["Batcher"]
