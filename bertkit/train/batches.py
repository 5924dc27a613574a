"""Resumable batch streams over a map-style dataset: :class:`Batches` (shuffled, rank-aware) and
:class:`LengthGroupedBatches` (shuffled, similar lengths together, for padded sequences)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

logger = logging.getLogger("bertkit")


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of one epoch's order: a function of (seed, epoch) only, so a resumed stream re-derives it."""
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


def _fetch(dataset, idx: list[int]) -> list:
    """The items at ``idx``: drawn together through ``__getitems__`` when the dataset has it (as DataLoader
    does; the pre-training dataset draws a whole batch in numpy), else one by one."""
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(idx) if getitems else [dataset[i] for i in idx]


class _BatchStream:
    """What both streams share: the dataset, the collate function, the seed and the count of batches taken
    (their whole state: each epoch's order is re-derived from ``(seed, epoch)``)."""

    def __init__(self, dataset, batch_size: int, collate_fn: Callable[[list], Any] | None, seed: int):
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn or (lambda items: items)
        self.seed = int(seed)
        self.consumed = 0  # batches this stream (this rank) has given

    def __iter__(self) -> Iterator:
        return self

    def _give(self, idx: list[int]):
        """The collated batch of the items at ``idx``, counted as taken."""
        self.consumed += 1
        return self.collate_fn(_fetch(self.dataset, idx))

    def _restore(self, state: dict, saved: tuple, current: tuple, what: str) -> None:
        """Load ``state`` (from ``state_dict``); warn when the settings that fix the order differ."""
        if saved != current:
            logger.warning("resuming %s with %s instead of %s: the data order changes", what, current, saved)
        self.seed = state.get("seed", self.seed)
        self.consumed = int(state["consumed"])


class Batches(_BatchStream):
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
        super().__init__(dataset, batch_size, collate_fn, seed)
        self.shuffle = shuffle
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self.max_epochs = max_epochs
        self._perm_epoch = -1
        self._perm: torch.Tensor | None = None
        self._dataset_epoch = None

    def steps_per_epoch(self) -> int:
        return len(self.dataset) // self.global_batch

    def _perm_for(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            n = len(self.dataset)
            if self.shuffle:
                self._perm = torch.randperm(n, generator=_epoch_generator(self.seed, epoch))
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

    def __next__(self):
        epoch, idx = self.indices(self.consumed)
        if self.max_epochs is not None and epoch >= self.max_epochs:
            raise StopIteration
        if epoch != self._dataset_epoch and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
            self._dataset_epoch = epoch
        return self._give(idx)

    def state_dict(self) -> dict:
        return {
            "consumed": self.consumed,
            "seed": self.seed,
            "world_size": self.world_size,
            "grad_accum": self.grad_accum,
        }

    def load_state_dict(self, state: dict) -> None:
        saved = (state.get("world_size", 1), state.get("grad_accum", 1))
        self._restore(state, saved, (self.world_size, self.grad_accum), "with (world_size, grad_accum)")


class LengthGroupedBatches(_BatchStream):
    """Endless stream of batches of similar-length items, shuffled per epoch, exactly resumable.

    For padded sequence batches: padding every batch to its longest member wastes little when members have
    similar lengths. Epoch ``e`` draws from a ``torch.Generator`` seeded by ``(seed, e)``: a random permutation
    of the items, cut into chunks of ``batch_size * bucket_batches`` items; each chunk is sorted by length
    and cut into batches of ``batch_size`` (the last one of a chunk may be shorter); then the order of all the
    epoch's batches is shuffled, so short and long batches alternate instead of lengths rising within a chunk.
    Nothing is dropped: an epoch has ``ceil(len(dataset) / batch_size)`` batches.

    Same protocol as :class:`Batches` (``__next__``, ``state_dict``/``load_state_dict``, ``steps_per_epoch``):
    because an epoch's plan is re-derived from ``(seed, epoch)``, the state is just the number of batches
    taken, and a resumed stream continues with exactly the batches it would have given.

    Several processes and gradient accumulation: an optimizer step takes ``G = world_size * grad_accum``
    consecutive batches of the plan, and rank ``r``'s micro-batch ``m`` is batch ``r * grad_accum + m`` of
    them, so N processes see exactly the batches of one process with ``grad_accum = N``. An epoch then has
    ``ceil(batches / G)`` steps; the last step's missing batches are taken from the start of the epoch's plan
    (every rank must take part in every step).
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        collate_fn: Callable[[list], Any] | None = None,
        *,
        lengths: Sequence[int] | None = None,
        seed: int = 0,
        bucket_batches: int = 50,
        rank: int = 0,
        world_size: int = 1,
        grad_accum: int = 1,
    ):
        if batch_size < 1 or bucket_batches < 1 or grad_accum < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"bad batching: batch_size={batch_size} bucket_batches={bucket_batches} "
                f"grad_accum={grad_accum} rank={rank}/{world_size}"
            )
        if len(dataset) == 0:
            raise ValueError("the dataset is empty; there is nothing to batch")
        super().__init__(dataset, batch_size, collate_fn, seed)
        self.lengths = list(lengths) if lengths is not None else [len(x) for x in dataset]
        if len(self.lengths) != len(dataset):
            raise ValueError(f"{len(self.lengths)} lengths for {len(dataset)} items")
        self.bucket_batches = bucket_batches
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self._plan_epoch = -1
        self._plan: list[list[int]] = []

    def batches_per_epoch(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch (each takes ``world_size * grad_accum`` batches)."""
        return math.ceil(self.batches_per_epoch() / (self.world_size * self.grad_accum))

    def plan(self, epoch: int) -> list[list[int]]:
        """The dataset indices of every batch of ``epoch``, in the order they are given."""
        if epoch != self._plan_epoch:
            g = _epoch_generator(self.seed, epoch)
            perm = torch.randperm(len(self.dataset), generator=g).tolist()
            chunk = self.batch_size * self.bucket_batches
            batches = []
            for c in range(0, len(perm), chunk):
                part = sorted(perm[c : c + chunk], key=self.lengths.__getitem__)
                batches += [part[i : i + self.batch_size] for i in range(0, len(part), self.batch_size)]
            order = torch.randperm(len(batches), generator=g).tolist()
            self._plan = [batches[i] for i in order]
            self._plan_epoch = epoch
        return self._plan

    def indices(self, n: int) -> tuple[int, list[int]]:
        """(epoch, dataset indices) of this rank's ``n``-th batch."""
        step, m = divmod(n, self.grad_accum)
        epoch, s = divmod(step, self.steps_per_epoch())
        plan = self.plan(epoch)
        k = (s * self.world_size + self.rank) * self.grad_accum + m
        return epoch, plan[k % len(plan)]

    def __next__(self):
        return self._give(self.indices(self.consumed)[1])

    def state_dict(self) -> dict:
        return {
            "consumed": self.consumed,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "n": len(self.dataset),
            "world_size": self.world_size,
            "grad_accum": self.grad_accum,
        }

    def load_state_dict(self, state: dict) -> None:
        saved = (
            state.get("n"),
            state.get("batch_size"),
            state.get("world_size", 1),
            state.get("grad_accum", 1),
        )
        current = (len(self.dataset), self.batch_size, self.world_size, self.grad_accum)
        self._restore(state, saved, current, "a length-grouped stream (items, batch, world_size, grad_accum)")
