"""Drawing dynamic masked-LM / next-sentence instances for a whole batch at once (numpy, no per-item Python).

Used by :class:`bertkit.data.dynamic.PretrainingDataset`; see its module docstring for the algorithm. Shapes:
``B`` instances in the batch, ``T`` the longest of them (<= max_seq_length).

Randomness is counter-based: random number ``j`` of draw ``slot`` for the instance with global index ``g`` in
epoch ``e`` is ``SplitMix64(key(seed, e, g) + slot * 2**32 + j)``. So an instance depends only on
(seed, epoch, index) - never on which other instances share its batch, the batch size, the DataLoader worker
or the resume point - while every number of the whole batch is computed by a few vectorised integer ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Streams", "pair_lengths", "draw_batch"]

_M64 = (1 << 64) - 1
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_TOP = np.uint64(_M64)

# One number per instance each (numbers 0..7 of stream SCALARS, drawn together in one go).
SHORT, TARGET, SPLIT, NEXT, DOC, START = range(6)
# Streams: one per use, so adding a draw never shifts the others.
SCALARS, TRIM_A, TRIM_B, MASK_KEY, MASK_VALUE = range(5)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (a bijection of uint64 with good avalanche); arrays only (they wrap
    silently, numpy scalars would warn on overflow)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class Streams:
    """Counter-based random numbers of a batch of instances (``index``: int64 [B] global indices)."""

    def __init__(self, seed: int, epoch: int, index: np.ndarray):
        key = _mix(np.array([((seed & 0xFFFFFFFF) << 32) | (epoch & 0xFFFFFFFF)], dtype=np.uint64))
        self.base = _mix(key ^ _mix(np.asarray(index, dtype=np.uint64) * _GAMMA))  # [B]
        self.unit = _to_unit(self.bits(SCALARS, 8))  # [B, 8]: the per-instance scalars, one hash call

    def bits_at(self, slot: int, rows: np.ndarray, cols: np.ndarray | int = 0) -> np.ndarray:
        """uint64 numbers ``cols`` of ``slot`` for the instances at ``rows`` (broadcast together)."""
        ctr = (np.uint64(slot) << np.uint64(32)) + np.array(cols, dtype=np.uint64, ndmin=1) + np.uint64(1)
        return _mix(self.base[rows] + ctr * _GAMMA)

    def bits(self, slot: int, n: int) -> np.ndarray:
        """uint64 [B, n]: numbers 0..n-1 of ``slot`` for every instance."""
        return self.bits_at(slot, np.arange(len(self.base))[:, None], np.arange(n)[None, :])

    def uniform(self, slot: int) -> np.ndarray:
        """float64 [B] in [0, 1): the instances' scalar number ``slot`` (< 8)."""
        return self.unit[:, slot]

    def integers(self, slot: int, lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
        """int64 [B] uniform in [lo, hi) (hi > lo)."""
        lo = np.asarray(lo, dtype=np.int64)
        span = np.asarray(hi, dtype=np.int64) - lo
        return lo + (self.uniform(slot) * span).astype(np.int64)

    def binomial_half(self, slot: int, n: np.ndarray) -> np.ndarray:
        """int64 [B]: Binomial(n, 1/2) per instance, as the popcount of ``n`` random bits."""
        n = np.maximum(np.asarray(n, dtype=np.int64), 0)
        words = (int(n.max(initial=0)) + 63) // 64
        if words == 0:
            return np.zeros(len(self.base), dtype=np.int64)
        avail = np.clip(n[:, None] - 64 * np.arange(words)[None, :], 0, 64)
        low = (np.uint64(1) << np.minimum(avail, 63).astype(np.uint64)) - np.uint64(1)
        mask = np.where(avail >= 64, _TOP, low)
        return np.bitwise_count(self.bits(slot, words) & mask).sum(axis=1).astype(np.int64)


def _to_unit(bits: np.ndarray) -> np.ndarray:
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def pair_lengths(la: np.ndarray, lb: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lengths after the original's trimming to ``limit`` (the longer side first, B on ties), all int64 [B]."""
    excess = np.maximum(la + lb - limit, 0)
    d = np.minimum(excess, np.abs(la - lb))
    la = la - d * (la > lb)
    lb = lb - d * (lb > la)
    rest = excess - d  # the sides are equal now: B loses first, then they alternate
    return la - rest // 2, lb - (rest - rest // 2)


def _take(arrays: list[dict[str, np.ndarray]], key: str, shard: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``arrays[shard[i]][key][idx[i]]`` for every i, as int64 (one fancy-index gather per distinct shard)."""
    out = np.empty(idx.shape, dtype=np.int64)
    if idx.size == 0:
        return out
    first = int(shard.flat[0])
    if (shard == first).all():
        out[...] = arrays[first][key][idx]
        return out
    for k in _shards_in(shard, len(arrays)):
        m = shard == k
        out[m] = arrays[k][key][idx[m]]
    return out


def _shards_in(shard: np.ndarray, n_shards: int) -> list[int]:
    """The distinct values of ``shard`` (a scan per shard beats np.unique's hashing for few shards)."""
    if n_shards <= 8:
        return [k for k in range(n_shards) if (shard == k).any()]
    return np.unique(shard).tolist()


def _random_next(ds: Any, rs: Streams, doc: np.ndarray, target_b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Sentences from a random start in a random *other* document until ``target_b`` tokens are reached
    (at least one sentence): (shard, first token, end token), int64 [B] each."""
    pool = ds.pool_hi - ds.pool_lo
    if pool >= 2:
        inside = (doc >= ds.pool_lo) & (doc < ds.pool_hi)
        r = ds.pool_lo + rs.integers(DOC, 0, np.where(inside, pool - 1, pool))
        r = r + (inside & (r >= doc))  # skip the instance's own document
    else:
        r = doc  # a one-document corpus: nothing else to draw from
    sh = ds.shards
    s_lo, s_hi = sh.doc_sent_lo[r], sh.doc_sent_hi[r]
    shard = sh.doc_shard[r].astype(np.int64)
    start = rs.integers(START, s_lo, s_hi)
    start_tok = _take(sh.arrays, "sents", shard, start)
    end = np.empty_like(start)
    # sentence offsets are increasing within a shard: one searchsorted
    for k in _shards_in(shard, len(sh.arrays)):
        m = shard == k
        end[m] = np.searchsorted(sh.arrays[k]["sents"], start_tok[m] + target_b[m], side="left")
    end = np.clip(end, start + 1, s_hi)
    return shard, start_tok, _take(sh.arrays, "sents", shard, end)


def draw_batch(ds: Any, index: np.ndarray, epoch: int) -> dict[str, np.ndarray]:
    """Instances ``index`` (global chunk numbers, int64 [B]) of ``epoch`` for dataset ``ds``, padded:
    input_ids / token_type_ids / labels (-100 = not predicted) int64 [B, T], lengths int64 [B], and
    next_sentence_label int64 [B] unless ``ds.no_nsp``."""
    rs = Streams(ds.seed, epoch, index)
    arrays = ds.shards.arrays
    t_max = ds.max_num_tokens
    target = np.where(rs.uniform(SHORT) < ds.short_seq_prob, rs.integers(TARGET, 2, t_max + 1), t_max)
    shard = ds.chunk_shard[index].astype(np.int64)
    lo, hi = ds.chunk_lo[index], ds.chunk_hi[index]
    start, end = ds.chunk_start_tok[index], ds.chunk_end_tok[index]
    if getattr(ds, "pack_documents", False):
        tokens, body, length = _packed(ds, shard, start, end)
        types = np.zeros(body.shape, dtype=np.int64)
        return {"lengths": length, "token_type_ids": types, **_mask(ds, rs, tokens, body, length)}
    if ds.no_nsp:
        la = np.minimum(end - start, target)
        lb = np.zeros_like(la)
        fa = fb = b_start = lb
        b_shard, length = shard, la + 2
    else:
        a_end = _take(arrays, "sents", shard, lo + rs.integers(SPLIT, 1, np.maximum(hi - lo, 2)))
        is_random = (hi - lo == 1) | (rs.uniform(NEXT) < 0.5)
        b_shard, b_start, b_end = shard.copy(), a_end.copy(), end.copy()
        if is_random.any():
            rows = np.flatnonzero(is_random)
            sub = _Subset(rs, rows)
            rb = _random_next(ds, sub, ds.chunk_doc[index[rows]], target[rows] - (a_end[rows] - start[rows]))
            b_shard[rows], b_start[rows], b_end[rows] = rb
        la0, lb0 = a_end - start, b_end - b_start
        la, lb = pair_lengths(la0, lb0, target)
        # Trimmed tokens: a binomial share from the front, the rest from the back (as coin-by-coin trimming).
        fa, fb = rs.binomial_half(TRIM_A, la0 - la), rs.binomial_half(TRIM_B, lb0 - lb)
        length = la + lb + 3

    p = np.arange(int(length.max()))[None, :]
    col = lambda v: v[:, None]  # noqa: E731 - [B] -> [B, 1] for broadcasting against positions
    in_a = (p >= 1) & (p <= col(la))
    in_b = (p >= col(la + 2)) & (p < col(la + 2 + lb))
    src = np.where(in_a, col(start + fa - 1) + p, col(b_start + fb - la - 2) + p)
    src_shard = np.where(in_a, col(shard), col(b_shard))
    body = in_a | in_b
    tokens = np.full(body.shape, ds.pad_id, dtype=np.int64)
    tokens[body] = _take(arrays, "ids", src_shard[body], src[body])
    rows = np.arange(len(index))
    tokens[:, 0] = ds.cls_id
    tokens[rows, length - 1] = ds.sep_id
    inside = p < col(length)
    if ds.no_nsp:
        types = np.zeros(body.shape, dtype=np.int64)
    else:
        tokens[rows, la + 1] = ds.sep_id
        types = ((p >= col(la + 2)) & inside).astype(np.int64)
    out = {"lengths": length, "token_type_ids": types, **_mask(ds, rs, tokens, body, length)}
    if not ds.no_nsp:
        out["next_sentence_label"] = is_random.astype(np.int64)
    return out


def _packed(
    ds: Any, shard: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed instances ``[CLS] doc … [SEP] doc … [SEP]`` of the chunks' tokens, a [SEP] where a document
    starts inside a chunk, cut at the window: tokens int64 [B, T], body (the maskable tokens) bool [B, T],
    lengths int64 [B]. One row at a time: a chunk crosses few document boundaries."""
    rows = []
    for k, s, e in zip(shard.tolist(), start.tolist(), end.tolist()):
        ids = np.asarray(ds.shards.arrays[k]["ids"][s:e], dtype=np.int64)
        starts = ds.doc_start_tok[k]
        cuts = starts[np.searchsorted(starts, s, side="right") : np.searchsorted(starts, e, side="left")] - s
        row = np.insert(ids, cuts, ds.sep_id)
        special = np.zeros(len(row), dtype=bool)
        special[cuts + np.arange(len(cuts))] = True  # where the separators landed
        rows.append((row[: ds.max_num_tokens], special[: ds.max_num_tokens]))
    length = np.array([len(r) + 2 for r, _ in rows], dtype=np.int64)
    tokens = np.full((len(rows), int(length.max())), ds.pad_id, dtype=np.int64)
    body = np.zeros(tokens.shape, dtype=bool)
    for i, (row, special) in enumerate(rows):
        tokens[i, 0] = ds.cls_id
        tokens[i, 1 : len(row) + 1] = row
        tokens[i, len(row) + 1] = ds.sep_id
        body[i, 1 : len(row) + 1] = ~special
    return tokens, body, length


class _Subset(Streams):
    """The streams of some rows of a batch (same numbers as the full batch's for those instances)."""

    def __init__(self, parent: Streams, rows: np.ndarray):
        self.base, self.unit = parent.base[rows], parent.unit[rows]


def _mask(ds: Any, rs: Streams, tokens: np.ndarray, cand: np.ndarray, length: np.ndarray) -> dict:
    """Choose ``min(max_predictions, max(1, round(length * prob)))`` candidate positions per row (``cand``:
    bool [B, T], non-special tokens) - uniformly, or whole words with ``ds.whole_word_mask`` - and apply
    80% [MASK] / 10% random id / 10% unchanged. Returns input_ids and labels, int64 [B, T]."""
    n_rows, width = tokens.shape
    num = np.minimum(ds.max_predictions_per_seq, np.maximum(1, np.rint(length * ds.masked_lm_prob)))
    keys = np.where(cand, rs.bits(MASK_KEY, width) >> np.uint64(1), _TOP)  # non-candidates sort last
    if ds.whole_word_mask:
        chosen = _whole_words(ds, tokens, cand, keys, num)
    else:
        # The num-th smallest key per row is the threshold (64-bit keys: ties have probability ~2^-50).
        kth = np.sort(keys, axis=1)[np.arange(n_rows), num.astype(np.int64) - 1]
        chosen = cand & (keys <= kth[:, None])
    r, c = np.nonzero(chosen)
    # One hash per chosen position: its high 32 bits pick [MASK]/random/keep, its low 32 bits the random id.
    value = rs.bits_at(MASK_VALUE, r, c)
    kind = (value >> np.uint64(32)).astype(np.float64) * 2.0**-32
    rand_ids = ((value & np.uint64(0xFFFFFFFF)) * np.uint64(ds.vocab_size)) >> np.uint64(32)
    labels = np.full(tokens.shape, -100, dtype=np.int64)
    labels[r, c] = tokens[r, c]
    out = tokens.copy()
    new = tokens[r, c]
    new[kind < 0.8] = ds.mask_id
    rnd = kind >= 0.9
    new[rnd] = rand_ids[rnd].astype(np.int64)
    out[r, c] = new
    return {"input_ids": out, "labels": labels}


def _whole_words(
    ds: Any, tokens: np.ndarray, cand: np.ndarray, keys: np.ndarray, num: np.ndarray
) -> np.ndarray:
    """bool [B, T]: whole words (a token + its following '##' pieces, never across a special) taken in a
    random order while they fit in ``num`` - the original's greedy rule, one word rank per step for all rows."""
    n_rows, width = tokens.shape
    cont = cand & ds.is_continuation[tokens]
    cont[:, 1:] &= cand[:, :-1]  # a '##' piece right after a special starts its own word
    starts = cand & ~cont
    word = np.cumsum(starts, axis=1) - 1  # word number of each position (within its row)
    flat = (np.arange(n_rows)[:, None] * width + word)[cand]
    size = np.bincount(flat, minlength=n_rows * width).reshape(n_rows, width)  # [row, word] -> tokens
    word_key = np.where(starts, keys, _TOP)
    order = np.argsort(word_key, axis=1, kind="stable")  # start positions, in random word order
    n_words = starts.sum(axis=1)
    rows = np.arange(n_rows)
    taken = np.zeros((n_rows, width), dtype=bool)  # [row, word]
    total = np.zeros(n_rows, dtype=np.int64)
    for k in range(int(n_words.max(initial=0))):
        live = (k < n_words) & (total < num)
        if not live.any():
            break
        w = word[rows, order[:, k]]
        ln = size[rows, w]
        ok = live & (total + ln <= num)
        taken[rows[ok], w[ok]] = True
        total += ln * ok
    return cand & taken[rows[:, None], np.maximum(word, 0)]
