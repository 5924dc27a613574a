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


TRACED_BLOCK = 32  # queries per block in a traced graph (the ONNX export)


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
    # A trace takes the blocks at every length, so there small blocks keep short inputs cheap (fewer padded
    # queries, fewer keys per query); eager runs take blocks only on long inputs, where larger ones pay.
    block = block or (min(window, TRACED_BLOCK) if torch.jit.is_tracing() else default_block(window))
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
    # Whole blocks only, sizes taken from the tensors (a trace records them, so one graph takes any length):
    # queries padded up to n blocks; block i's keys are the `window` positions before it, the block and the
    # `window` after, cut from the 2 halo + 1 blocks around it (K and V padded by `halo` blocks of zeros).
    halo = -(-window // block)  # blocks on each side that the window reaches into
    extra = (block - t % block) % block
    width = block + 2 * window
    first = halo * block - window  # the first of the (2 halo + 1) blocks' keys in reach of the block

    def key_blocks(x: Tensor) -> Tensor:
        """[B, A, T, d] -> [B, A, n, width, d]: block i's keys, positions i*block - window .. + width - 1."""
        x = F.pad(x, (0, 0, halo * block, halo * block + extra))
        x = x.reshape(x.shape[0], x.shape[1], -1, block, x.shape[-1])  # n + 2 halo blocks
        n = x.shape[2] - 2 * halo
        near = torch.cat([x[:, :, s : s + n] for s in range(2 * halo + 1)], dim=3)
        return near[:, :, :, first : first + width]

    qb = F.pad(q, (0, 0, 0, extra)).reshape(b, a, -1, block, d)
    valid = torch.ones(b, t, dtype=torch.bool, device=q.device) if key_mask is None else key_mask.bool()
    valid = key_blocks(valid[:, None, :, None])[:, 0, :, :, 0]  # [B, n, width]; outside the sequence: False
    i = torch.arange(block, device=q.device)[:, None]
    j = torch.arange(width, device=q.device)[None, :]
    band = (j >= i) & (
        j <= i + 2 * window
    )  # query i of a block, key j of its keys: |i + window - j| <= window
    mask = band & (valid[:, :, None, :] | (j == i + window))  # [B, n, block, width]
    ctx = scaled_dot_product_attention(qb, key_blocks(k), key_blocks(v), mask[:, None], False, dropout_p)
    return ctx.reshape(b, a, -1, d)[:, :, :t]
