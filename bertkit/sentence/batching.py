"""Token-id lists -> padded batch tensors, and the inference mode the sentence models predict in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn


def pad(
    rows: Sequence[Sequence[int]], pad_id: int, types: Sequence[Sequence[int]] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``rows`` of token ids -> (ids [B, T], mask [B, T], token types [B, T]) as int64, T the longest row."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    type_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
        if types is not None:
            type_ids[i, : len(r)] = torch.tensor(types[i])
    return ids, mask, type_ids


def length_batches(rows: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Row positions in batches of ``batch_size``, longest rows first: batches of similar length carry little
    padding, and memory peaks early."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


@contextlib.contextmanager
def predicting(module: nn.Module) -> Iterator[None]:
    """Eval mode and no autograd for the block; the module's training flag is restored afterwards (a model
    being trained may be evaluated between steps)."""
    was = module.training
    module.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        module.train(was)
