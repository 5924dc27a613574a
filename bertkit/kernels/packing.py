"""Packing: a padded batch's real tokens side by side, so position-wise work skips the padding.

When a batch carries padding, every position-wise operation of the encoder (embeddings, Q/K/V and output
projections, feed-forward, LayerNorm) runs on the packed real tokens only ([N, H] with N the number of
real tokens) and attention runs on groups of equal-length sequences with no mask. The arithmetic per real
token is unchanged, so results equal the padded computation up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .gemm import bucket, onednn_in_use
from .state import enabled


class Packing:
    """Where the real tokens of a padded [B, T] batch sit, to move between [R, H] and [B, T, H].

    Sequences are packed longest first, so sequences of equal length lie side by side: ``groups``
    lists (number of sequences, length) for each run of equal lengths, in packed order; a run views as
    a dense [count, length, H] block for attention. Any mask pattern works (not only right padding): a
    sequence's real tokens keep their order and their position ids.

    When autograd records or the GEMMs run on oneDNN, the packed rows are rounded up (``R = len(rows) >=
    tokens``) to one of a few sizes per power of two (:func:`bertkit.kernels.gemm.bucket`) with copies of
    the first real token, which no group attends to and :meth:`unpack` drops. Every activation then comes
    in a few shapes, so the allocator reuses freed blocks: with a new row count every batch, training grew
    the heap by hundreds of MB (freed but fragmented memory). The oneDNN GEMMs pad to these sizes anyway.
    Inference on ``F.linear`` keeps the exact rows: rounding would add 4.7% GEMM work on average.
    """

    def __init__(self, mask: Tensor) -> None:
        self.batch, self.seq_len = mask.shape
        lengths = mask.sum(1)
        order = torch.sort(lengths, descending=True, stable=True).indices
        rows, cols = mask.index_select(0, order).nonzero(as_tuple=True)
        self.index = order.index_select(0, rows) * self.seq_len + cols  # [N] flat positions, packed order
        self.tokens = int(self.index.numel())
        round_up = self.tokens and (torch.is_grad_enabled() or onednn_in_use())
        extra = bucket(self.tokens) - self.tokens if round_up else 0
        self.rows = self.index if not extra else torch.cat([self.index, self.index[:1].expand(extra)])
        values, counts = torch.unique_consecutive(lengths.index_select(0, order), return_counts=True)
        # (number of sequences, length) of each run of equal lengths, in packed order
        self.groups = [(c, n) for n, c in zip(values.tolist(), counts.tolist()) if n > 0]

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, ...] -> [R, ...] (the rows past ``tokens`` are padding)."""
        return x.reshape(self.batch * self.seq_len, *x.shape[2:]).index_select(0, self.rows)

    def unpack(self, x: Tensor) -> Tensor:
        """[R, ...] -> [B, T, ...] with zeros at padded positions."""
        out = x.new_zeros(self.batch * self.seq_len, *x.shape[1:])
        out = out.index_copy(0, self.index, x[: self.tokens])
        return out.view(self.batch, self.seq_len, *x.shape[1:])


def packing_for(attention_mask: Tensor | None) -> Packing | None:
    """A :class:`Packing` of ``attention_mask`` [B, T] (1 = real token) when the batch has padding, the
    kernels are on and the batch is on the CPU; None means: run the padded batch with its mask.

    On a GPU the padded batch runs as it is: one attention call per length group (and reading the groups'
    sizes back to the host, a synchronisation per batch) left a BERT-base pre-training step on an H200
    waiting on kernel launches, slower than the padded computation it saves work on (lab/notes/notes-perf.md)."""
    if (
        attention_mask is None
        or not enabled()
        or torch.jit.is_tracing()
        or attention_mask.device.type != "cpu"
    ):
        return None
    if bool(attention_mask.all()):
        return None
    return Packing(attention_mask.bool())


def packed_attention(qkv: Tensor, packing: Packing, attend: Callable[[Tensor], Tensor]) -> Tensor:
    """qkv [R, 3H] of packed tokens -> [R, H]: ``attend`` ([count, length, 3H] -> [count, length, H], no
    mask) runs once per group of equal-length sequences, so no work is spent on padding."""
    # One split rather than a slice per group: the backward of a slice writes its gradient into a
    # zero-filled tensor of the whole qkv size (one per group); split's backward is one concatenation.
    sizes = [count * length for count, length in packing.groups]
    extra = qkv.shape[0] - packing.tokens
    parts = qkv.split(sizes + [extra] if extra else sizes)
    outs = [
        attend(part.view(count, length, -1)).view(count * length, -1)
        for part, (count, length) in zip(parts, packing.groups)
    ]
    if extra:  # the rows that round the packing up: nothing attends from or to them
        outs.append(qkv.new_zeros(extra, outs[0].shape[1]))
    return outs[0] if len(outs) == 1 else torch.cat(outs)
