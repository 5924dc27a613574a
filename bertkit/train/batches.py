"""Batches: a deterministic, resumable, rank-aware stream of micro-batches over a map-style dataset."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

logger = logging.getLogger("bertkit")


class Batches:
    """Endless stream of micro-batches over a map-style dataset, shuffled per epoch, exactly resumable.

    The unit is the *global batch* of ``G = batch_size * world_size * grad_accum`` examples per optimizer
    step: epoch ``e`` is a permutation drawn from a ``torch.Generator`` seeded by ``(seed, e)``, cut into
    ``len(dataset) // G`` global batches (the ragged end is dropped). Inside a global batch, rank ``r``'s
    micro-batch ``m`` is slice ``r * grad_accum + m`` of size ``batch_size``. So every split of the same global
    batch over processes and accumulation steps sees the same examples at the same step (2 processes equal
    1 process with ``grad_accum=2``, exactly). If the dataset has ``set_epoch(e)`` (dynamic masking) it is
    called whenever the stream enters epoch ``e``. ``state_dict()`` is the data position; the shuffling
    generator is re-derived from ``(seed, epoch)``, so it needs no state of its own.
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        collate_fn: Callable[[list], Any] | None = None,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        grad_accum: int = 1,
        max_epochs: int | None = None,
    ):
        if batch_size < 1 or grad_accum < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"bad batching: batch_size={batch_size} grad_accum={grad_accum} rank={rank}/{world_size}"
            )
        self.global_batch = batch_size * world_size * grad_accum
        n = len(dataset)
        if n < self.global_batch:
            raise ValueError(
                f"dataset has {n} examples, fewer than one global batch of {self.global_batch}; "
                "use more data or a smaller batch"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn or (lambda items: items)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self.max_epochs = max_epochs
        self.consumed = 0  # micro-batches this rank has taken
        self._perm_epoch = -1
        self._perm: torch.Tensor | None = None
        self._dataset_epoch = None

    def steps_per_epoch(self) -> int:
        return len(self.dataset) // self.global_batch

    def _perm_for(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            n = len(self.dataset)
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._perm = torch.randperm(n, generator=g)
            else:
                self._perm = torch.arange(n)
            self._perm_epoch = epoch
        return self._perm

    def indices(self, n: int) -> tuple[int, list[int]]:
        """(epoch, dataset indices) of this rank's ``n``-th micro-batch."""
        step, m = divmod(n, self.grad_accum)
        epoch, s = divmod(step, self.steps_per_epoch())
        start = s * self.global_batch + (self.rank * self.grad_accum + m) * self.batch_size
        return epoch, self._perm_for(epoch)[start : start + self.batch_size].tolist()

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        epoch, idx = self.indices(self.consumed)
        if self.max_epochs is not None and epoch >= self.max_epochs:
            raise StopIteration
        if epoch != self._dataset_epoch and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
            self._dataset_epoch = epoch
        self.consumed += 1
        getitems = getattr(self.dataset, "__getitems__", None)  # a whole batch at once, as DataLoader does
        return self.collate_fn(getitems(idx) if getitems else [self.dataset[i] for i in idx])

    def state_dict(self) -> dict:
        return {
            "consumed": self.consumed,
            "seed": self.seed,
            "world_size": self.world_size,
            "grad_accum": self.grad_accum,
        }

    def load_state_dict(self, state: dict) -> None:
        if (state.get("world_size", 1), state.get("grad_accum", 1)) != (self.world_size, self.grad_accum):
            logger.warning(
                "resuming with world_size*grad_accum %s*%s instead of %s*%s: the data order changes",
                self.world_size, self.grad_accum, state.get("world_size"), state.get("grad_accum"),
            )  # fmt: skip
        self.seed = state.get("seed", self.seed)
        self.consumed = int(state["consumed"])
