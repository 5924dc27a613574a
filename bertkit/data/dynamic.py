"""Dynamic masked-LM / next-sentence instances drawn on the fly from token shards.

Public API (stable; the pre-training loop uses exactly this)::

    from bertkit.data import PretrainingDataset, collate_pretraining, EpochSampler

    ds = PretrainingDataset(data_dir, max_seq_length=128, masked_lm_prob=0.15, max_predictions_per_seq=20,
                            short_seq_prob=0.1, seed=0, no_nsp=False, whole_word_mask=False,
                            rank=0, world_size=1, split="train", valid_documents=None)
    ds.set_epoch(epoch)                     # call before each epoch (also in DataLoader workers: see below)
    item = ds[i]                            # dict of numpy int64 arrays, unpadded
    loader = DataLoader(ds, batch_size=32, sampler=EpochSampler(ds, seed=0), collate_fn=ds.collate)
    batch = next(iter(loader))              # dict of torch.long tensors:
      input_ids [B,T], attention_mask [B,T], token_type_ids [B,T],
      labels [B,T] (-100 where not masked, as Hugging Face), next_sentence_label [B] (1 = random next,
      as the original; absent when no_nsp=True)

How an item is made (the original algorithm, reorganised so any item can be drawn alone):

- Once, at construction, each document's sentences are cut into *chunks* of about
  ``max_seq_length - 3`` tokens (whole sentences; vectorised over all shards). ``len(ds)`` is the number of
  chunks of this rank's part of the split.
- Item ``i`` of epoch ``e`` uses its own generator ``Philox(key=(seed, e, global chunk index))``, so it is
  deterministic in (seed, epoch, index) whatever the worker, batch size or resume point. Per item, as the
  original: with ``short_seq_prob`` a shorter target length ``randint(2, max_num_tokens)``; a split point
  ``a_end`` among the chunk's sentences; B is the rest of the chunk, or (half the time, always for a
  one-sentence chunk) sentences from a random start in a random *other* document of the split until the
  target is reached; the pair is trimmed to the target, longer side first, with a random front/back
  split; masking picks
  ``min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))`` non-special positions (whole
  words with ``whole_word_mask``), 80% ``[MASK]`` / 10% random vocabulary id / 10% unchanged.
- ``no_nsp=True``: one contiguous segment ``[CLS] chunk [SEP]`` of up to ``max_seq_length - 2`` tokens
  (the paper's "No NSP" ablation); no ``next_sentence_label``.
- Differences from the static stream (by design): unused B-side sentences of a random-next pair are not
  "put back" into the same epoch (they are used in other epochs), and a random document is always a
  different one (the original gives up after ten tries).

Splits: ``split="valid"`` is the last ``valid_documents`` documents (default: 1%, at least 1 when there are
at least 2 documents), ``"train"`` the rest, ``"all"`` everything. The valid split ignores ``set_epoch``
(always epoch 0) so evaluations are comparable. DDP: ``rank``/``world_size`` give each rank a contiguous
slice of the chunks (the same length on every rank), so each rank reads mostly its own shards.

DataLoader workers are forked copies: call ``ds.set_epoch(e)`` before creating the iterator each epoch
(persistent workers would keep the old epoch), or pass ``EpochSampler`` and build a new iterator per epoch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch

from bertkit.data.shards import ShardSet
from bertkit.errors import UserError

__all__ = ["PretrainingDataset", "collate_pretraining", "EpochSampler"]

_MASK32 = 0xFFFFFFFF


def _pair_lengths(la: int, lb: int, limit: int) -> tuple[int, int]:
    """Lengths after the original's trimming (longer side first, B on ties) to ``limit`` tokens."""
    excess = la + lb - limit
    if excess <= 0:
        return la, lb
    if la > lb:
        d = min(excess, la - lb)
        la -= d
        excess -= d
    elif lb > la:
        d = min(excess, lb - la)
        lb -= d
        excess -= d
    # Equal now: B loses first, then they alternate.
    return la - excess // 2, lb - (excess - excess // 2)


class PretrainingDataset(torch.utils.data.Dataset):
    """Masked-LM (+ next-sentence) items drawn on the fly from a ``bertkit prepare`` directory."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        max_seq_length: int = 128,
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int = 20,
        short_seq_prob: float = 0.1,
        seed: int = 0,
        no_nsp: bool = False,
        whole_word_mask: bool = False,
        rank: int = 0,
        world_size: int = 1,
        split: str = "train",
        valid_documents: int | None = None,
        verify: bool = False,
    ):
        if max_seq_length < 5:
            raise UserError(f"max_seq_length must be at least 5, got {max_seq_length}")
        if not 0 <= rank < world_size:
            raise UserError(f"rank {rank} outside world_size {world_size}")
        if split not in ("train", "valid", "all"):
            raise UserError(f"split must be 'train', 'valid' or 'all', not {split!r}")
        self.shards = ShardSet(data_dir, verify=verify)
        self.max_seq_length = int(max_seq_length)
        self.masked_lm_prob = float(masked_lm_prob)
        self.max_predictions_per_seq = int(max_predictions_per_seq)
        self.short_seq_prob = float(short_seq_prob)
        self.seed = int(seed)
        self.no_nsp = bool(no_nsp)
        self.whole_word_mask = bool(whole_word_mask)
        self.rank, self.world_size, self.split = int(rank), int(world_size), split
        self.epoch = 0
        self._gen: np.random.Generator | None = None
        self._bitgen = None
        self._arange = np.arange(self.max_seq_length + 1)

        words = self.shards.vocab_words()
        index = {w: i for i, w in enumerate(words)}
        self.vocab_size = len(words)
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = (
            index[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
        )
        self.is_continuation = np.fromiter((w.startswith("##") for w in words), dtype=bool, count=len(words))
        self.max_num_tokens = self.max_seq_length - (2 if self.no_nsp else 3)

        n_docs = self.shards.documents
        if valid_documents is None:
            valid_documents = max(1, round(0.01 * n_docs)) if n_docs >= 2 else 0
        valid_documents = min(int(valid_documents), n_docs)
        self.valid_documents = valid_documents
        if split == "train":
            lo, hi = 0, n_docs - valid_documents
        elif split == "valid":
            lo, hi = n_docs - valid_documents, n_docs
        else:
            lo, hi = 0, n_docs
        if hi <= lo:
            raise UserError(
                f"{data_dir}: split {split!r} has no documents ({n_docs} in all, {valid_documents} valid)"
            )
        self.doc_lo, self.doc_hi = lo, hi
        # Random next documents come from the split when it has two or more, else from everything.
        self.pool_lo, self.pool_hi = (lo, hi) if hi - lo >= 2 else (0, n_docs)
        self._plan_chunks()
        total = len(self.chunk_doc)
        self.per_rank = total // self.world_size if self.world_size > 1 else total
        if self.per_rank == 0:
            raise UserError(
                f"{data_dir}: {total} chunks cannot be split over {world_size} ranks; use more data"
            )
        self.offset = self.rank * self.per_rank

    # --- planning ----------------------------------------------------------------------------------

    def _plan_chunks(self) -> None:
        """Cut every document of the split into chunks of whole sentences of ~max_num_tokens (vectorised)."""
        t = self.max_num_tokens
        sh = self.shards
        docs = np.arange(self.doc_lo, self.doc_hi)
        c_shard, c_lo, c_hi, c_doc = [], [], [], []
        for k, arr in enumerate(sh.arrays):
            mine = docs[sh.doc_shard[docs] == k]
            if mine.size == 0:
                continue
            sents = np.asarray(arr["sents"])
            s_lo, s_hi = sh.doc_sent_lo[mine], sh.doc_sent_hi[mine]
            counts = s_hi - s_lo
            sent_idx = np.repeat(s_lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            doc_of = np.repeat(mine, counts)
            starts_tok = sents[sent_idx]  # token offset of each sentence
            doc_start_tok = np.repeat(sents[s_lo], counts)
            group = (starts_tok - doc_start_tok) // t  # chunk number within the document
            new = np.ones(len(sent_idx), dtype=bool)
            new[1:] = (doc_of[1:] != doc_of[:-1]) | (group[1:] != group[:-1])
            first = np.flatnonzero(new)
            last = np.append(first[1:], len(sent_idx))
            c_shard.append(np.full(len(first), k, dtype=np.int32))
            c_lo.append(sent_idx[first])
            c_hi.append(sent_idx[last - 1] + 1)
            c_doc.append(doc_of[first])
        self.chunk_shard = np.concatenate(c_shard)
        self.chunk_lo = np.concatenate(c_lo)
        self.chunk_hi = np.concatenate(c_hi)
        self.chunk_doc = np.concatenate(c_doc)
        order = np.argsort(self.chunk_doc, kind="stable")  # reading order across shards
        for name in ("chunk_shard", "chunk_lo", "chunk_hi", "chunk_doc"):
            setattr(self, name, getattr(self, name)[order])

    # --- Dataset API -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.per_rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def rng_for(self, index: int) -> np.random.Generator:
        """The generator of item ``index`` (this rank's numbering) in the current epoch."""
        epoch = 0 if self.split == "valid" else self.epoch
        g = self.offset + int(index)
        key = ((self.seed & _MASK32) << 32) | (epoch & _MASK32)
        if self._gen is None:
            self._bitgen = np.random.Philox(key=np.zeros(2, dtype=np.uint64))
            self._gen = np.random.Generator(self._bitgen)
        # Re-keying one Philox (counter 0, empty buffer) equals Philox(key=[key, g]), 4x cheaper than a new one.
        self._bitgen.state = {
            "bit_generator": "Philox",
            "state": {"counter": np.zeros(4, dtype=np.uint64), "key": np.array([key, g], dtype=np.uint64)},
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        return self._gen

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not 0 <= index < self.per_rank:
            raise IndexError(index)
        rng = self.rng_for(index)
        c = self.offset + int(index)
        arr = self.shards.arrays[self.chunk_shard[c]]
        ids, sents = arr["ids"], arr["sents"]
        lo, hi = int(self.chunk_lo[c]), int(self.chunk_hi[c])
        bounds = np.asarray(sents[lo : hi + 1])
        target = self.max_num_tokens
        if rng.random() < self.short_seq_prob:
            target = int(rng.integers(2, self.max_num_tokens + 1))

        if self.no_nsp:
            seg = np.asarray(ids[bounds[0] : min(bounds[-1], bounds[0] + target)], dtype=np.int64)
            tokens = np.concatenate(([self.cls_id], seg, [self.sep_id]))
            types = np.zeros(len(tokens), dtype=np.int64)
            specials = (0, len(tokens) - 1)
            out = self._mask(tokens, specials, rng)
            out["token_type_ids"] = types
            return out

        n = hi - lo
        a_end = int(rng.integers(1, n)) if n >= 2 else 1
        a = ids[bounds[0] : bounds[a_end]]
        is_random = n == 1 or rng.random() < 0.5
        if is_random:
            b = self._random_b(int(self.chunk_doc[c]), target - len(a), rng)
        else:
            b = ids[bounds[a_end] : bounds[-1]]
        la, lb = _pair_lengths(len(a), len(b), target)
        # Trimmed tokens: a binomial share from the front, the rest from the back (as coin-by-coin trimming).
        fa = int(rng.binomial(len(a) - la, 0.5)) if la < len(a) else 0
        fb = int(rng.binomial(len(b) - lb, 0.5)) if lb < len(b) else 0
        tokens = np.empty(la + lb + 3, dtype=np.int64)
        tokens[0] = self.cls_id
        tokens[1 : la + 1] = a[fa : fa + la]
        tokens[la + 1] = self.sep_id
        tokens[la + 2 : la + lb + 2] = b[fb : fb + lb]
        tokens[-1] = self.sep_id
        types = np.zeros(len(tokens), dtype=np.int64)
        types[la + 2 :] = 1
        out = self._mask(tokens, (0, la + 1, la + lb + 2), rng)
        out["token_type_ids"] = types
        out["next_sentence_label"] = np.array(1 if is_random else 0, dtype=np.int64)
        return out

    def _random_b(self, doc: int, target_b: int, rng: np.random.Generator) -> np.ndarray:
        pool = self.pool_hi - self.pool_lo
        if pool >= 2 and self.pool_lo <= doc < self.pool_hi:
            r = self.pool_lo + int(rng.integers(0, pool - 1))
            if r >= doc:
                r += 1
        elif pool >= 2:
            r = self.pool_lo + int(rng.integers(0, pool))
        else:
            r = doc  # a one-document corpus: nothing else to draw from
        sh = self.shards
        arr = sh.arrays[sh.doc_shard[r]]
        lo, hi = int(sh.doc_sent_lo[r]), int(sh.doc_sent_hi[r])
        start = lo + int(rng.integers(0, hi - lo))
        bounds = np.asarray(arr["sents"][start : hi + 1])
        cum = bounds[1:] - bounds[0]
        end = min(int(np.searchsorted(cum, target_b, side="left")), len(cum) - 1)
        return arr["ids"][bounds[0] : bounds[end + 1]]

    def _mask(
        self, tokens: np.ndarray, specials: np.ndarray, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        n = len(tokens)
        ar = self._arange
        if len(specials) == 2:
            cand = ar[1 : n - 1]
        else:
            cand = np.concatenate((ar[1 : specials[1]], ar[specials[1] + 1 : n - 1]))
        num = min(self.max_predictions_per_seq, max(1, int(round(n * self.masked_lm_prob))))
        if self.whole_word_mask:
            cont = self.is_continuation[tokens[cand]]
            cont[0] = False
            cont[1:] &= np.diff(cand) == 1  # a word never spans a [SEP]
            word_of = np.cumsum(~cont) - 1
            starts = np.flatnonzero(~cont)
            lengths = np.diff(np.append(starts, len(cand)))
            chosen_words = []
            total = 0
            for w in rng.permutation(len(starts)).tolist():
                if total >= num:
                    break
                ln = int(lengths[w])
                if total + ln > num:
                    continue
                chosen_words.append(w)
                total += ln
            pos = cand[np.isin(word_of, chosen_words)]
        else:
            pos = np.sort(cand[rng.permutation(len(cand))[:num]])
        k = len(pos)
        u = rng.random(k)
        rand_ids = rng.integers(0, self.vocab_size, k)
        labels = np.full(n, -100, dtype=np.int64)
        labels[pos] = tokens[pos]
        out = tokens.copy()
        out[pos[u < 0.8]] = self.mask_id
        rnd = u >= 0.9
        out[pos[rnd]] = rand_ids[rnd]
        return {"input_ids": out, "labels": labels}

    def collate(self, batch: Sequence[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return collate_pretraining(batch, pad_id=self.pad_id)

    @property
    def tokens_per_epoch(self) -> int:
        """Tokens in this rank's chunks (for throughput and progress estimates)."""
        sl = slice(self.offset, self.offset + self.per_rank)
        total = 0
        for k, arr in enumerate(self.shards.arrays):
            m = self.chunk_shard[sl] == k
            if m.any():
                s = np.asarray(arr["sents"])
                total += int((s[self.chunk_hi[sl][m]] - s[self.chunk_lo[sl][m]]).sum())
        return total


def collate_pretraining(
    batch: Sequence[dict[str, np.ndarray]], pad_id: int = 0, pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """Pad items to the longest in the batch: input_ids/attention_mask/token_type_ids/labels [B,T] (long),
    next_sentence_label [B] (when the items have it). Padding: ``pad_id``, mask 0, type 0, label -100."""
    if not batch:
        raise ValueError("empty batch")
    lengths = [len(item["input_ids"]) for item in batch]
    t = max(lengths)
    if pad_to_multiple_of:
        t = int(math.ceil(t / pad_to_multiple_of) * pad_to_multiple_of)
    b = len(batch)
    input_ids = np.full((b, t), pad_id, dtype=np.int64)
    types = np.zeros((b, t), dtype=np.int64)
    labels = np.full((b, t), -100, dtype=np.int64)
    mask = np.zeros((b, t), dtype=np.int64)
    for i, item in enumerate(batch):
        n = lengths[i]
        input_ids[i, :n] = item["input_ids"]
        types[i, :n] = item["token_type_ids"]
        labels[i, :n] = item["labels"]
        mask[i, :n] = 1
    out = {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(mask),
        "token_type_ids": torch.from_numpy(types),
        "labels": torch.from_numpy(labels),
    }
    if "next_sentence_label" in batch[0]:
        out["next_sentence_label"] = torch.tensor([int(item["next_sentence_label"]) for item in batch])
    return out


class EpochSampler(torch.utils.data.Sampler):
    """A deterministic shuffled order per (seed, epoch), resumable from any position.

    ``set_epoch(e)`` also sets the dataset's epoch; ``start`` skips the first items (to resume mid-epoch at
    ``step * batch_size``)."""

    def __init__(self, dataset: PretrainingDataset, seed: int = 0, shuffle: bool = True, start: int = 0):
        self.dataset, self.seed, self.shuffle, self.start = dataset, int(seed), bool(shuffle), int(start)
        self.epoch = dataset.epoch

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = int(epoch), int(start)
        self.dataset.set_epoch(epoch)

    def order(self) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, self.epoch, 0x5EED]).permutation(n)

    def __iter__(self):
        return iter(self.order()[self.start :].tolist())

    def __len__(self) -> int:
        return max(0, len(self.dataset) - self.start)
