"""Sliding-window attention without a T x T mask: a block of queries at a time against the keys in its reach.

A query at position i of a local layer attends to the keys at positions |i - j| <= window. For a short sequence
that is one SDPA call with a dense [T, T] band mask. For a long one the queries are cut into blocks of
``block`` positions; the block starting at s needs only the keys s - window .. s + block + window - 1, so every
block attends to its own ``block + 2 window`` keys (overlapping views of K and V padded by ``window`` zeros
on each side) with one mask pattern shared by all blocks. Scores and masks take T (block + 2 window) entries:
memory grows linearly in T, where the dense mask and scores grow as T^2 (8,192 tokens: 67M mask entries and
as many scores per head, against 4M with ModernBERT's window of 128 and blocks of 128).

Every query also sees itself: a padding query far from every real token then still has a key, so no row of
the softmax is empty (its NaN would reach real tokens through V, and gradients through the softmax).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import scaled_dot_product_attention


def window_mask(length: int, window: int, device: torch.device | None = None) -> Tensor:
    """bool [T, T]: True where |i - j| <= window (query i may attend to key j)."""
    idx = torch.arange(length, device=device)
    return (idx[:, None] - idx[None, :]).abs() <= window


def default_block(window: int) -> int:
    """Queries per block: twice the window (at least 64), so half of each block's keys are in reach."""
    return max(64, 2 * window)


def sliding_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    key_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    block: int | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(d) over the keys within ``window`` positions) v: q, k, v [B, A, T, d] -> [B, A, T, d].

    ``key_mask`` [B, T] (True = a real token) or None; ``dropout_p`` on the probabilities. Sequences longer
    than one block and its reach run block by block (``block`` queries each, :func:`default_block` by default)."""
    b, a, t, d = q.shape
    block = block or default_block(window)
    tracing = torch.jit.is_tracing()  # then t is a traced size: branch on it nowhere
    if key_mask is None and not tracing and t <= window + 1:  # every key in reach, no padding: SDPA unmasked
        return scaled_dot_product_attention(q, k, v, None, False, dropout_p)
    # One block would see every key: the dense band is no larger. A trace (the ONNX export) takes the blocks
    # whatever its example's length, so that the graph's memory stays linear in the length it is given.
    if not tracing and t <= block + 2 * window:
        mask = window_mask(t, window, q.device)
        if key_mask is not None:
            mask = mask & (
                key_mask.bool()[:, None, None, :] | torch.eye(t, dtype=torch.bool, device=q.device)
            )
        return scaled_dot_product_attention(q, k, v, mask, False, dropout_p)
    if block < window:
        raise ValueError(f"block {block} is shorter than the window's reach {window}")
    # Whole blocks only, sizes taken from the tensors (a trace records them, so one graph takes any length):
    # queries padded up to n blocks; block i's keys are the last `window` of block i - 1, block i and the first
    # `window` of block i + 1, from K and V padded by one block of zeros on each side.
    extra = (block - t % block) % block
    width = block + 2 * window

    def key_blocks(x: Tensor) -> Tensor:
        """[B, A, T, d] -> [B, A, n, width, d]: block i's keys, positions i*block - window .. + width - 1."""
        x = F.pad(x, (0, 0, block, block + extra)).reshape(b, a, -1, block, d)  # n + 2 blocks
        return torch.cat([x[:, :, :-2, block - window :], x[:, :, 1:-1], x[:, :, 2:, :window]], dim=3)

    qb = F.pad(q, (0, 0, 0, extra)).reshape(b, a, -1, block, d)
    valid = torch.ones(b, t, dtype=torch.bool, device=q.device) if key_mask is None else key_mask.bool()
    valid = F.pad(valid, (block, block + extra)).reshape(b, -1, block)  # outside the sequence: False
    valid = torch.cat([valid[:, :-2, block - window :], valid[:, 1:-1], valid[:, 2:, :window]], dim=2)
    i = torch.arange(block, device=q.device)[:, None]
    j = torch.arange(width, device=q.device)[None, :]
    band = (j >= i) & (
        j <= i + 2 * window
    )  # query i of a block, key j of its keys: |i + window - j| <= window
    mask = band & (valid[:, :, None, :] | (j == i + window))  # [B, n, block, width]
    ctx = scaled_dot_product_attention(qb, key_blocks(k), key_blocks(v), mask[:, None], False, dropout_p)
    return ctx.reshape(b, a, -1, d)[:, :, :t]
