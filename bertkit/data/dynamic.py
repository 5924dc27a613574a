"""Dynamic masked-LM / next-sentence instances drawn on the fly from token shards.

Public API (stable; the pre-training loop uses exactly this)::

    from bertkit.data import PretrainingDataset, collate_pretraining, EpochSampler

    ds = PretrainingDataset(data_dir, max_seq_length=128, masked_lm_prob=0.15, max_predictions_per_seq=20,
                            short_seq_prob=0.1, seed=0, no_nsp=False, whole_word_mask=False,
                            rank=0, world_size=1, split="train", valid_documents=None)
    ds.set_epoch(epoch)                     # call before each epoch (also in DataLoader workers: see below)
    item = ds[i]                            # dict of numpy int64 arrays, unpadded
    items = ds.__getitems__([i, j, k])      # the same items, drawn together (and already padded)
    loader = DataLoader(ds, batch_size=32, sampler=EpochSampler(ds, seed=0), collate_fn=ds.collate)
    batch = next(iter(loader))              # dict of torch.long tensors:
      input_ids [B,T], attention_mask [B,T], token_type_ids [B,T],
      labels [B,T] (-100 where not masked, as Hugging Face), next_sentence_label [B] (1 = random next,
      as the original; absent when no_nsp=True)

How an item is made (the original algorithm, reorganised so any item can be drawn alone):

- Once, at construction, each document's sentences are cut into *chunks* of about
  ``max_seq_length - 3`` tokens (whole sentences; vectorised over all shards). ``len(ds)`` is the number of
  chunks of this rank's part of the split.
- Item ``i`` of epoch ``e`` draws its random numbers from counter-based streams keyed by
  (seed, e, global chunk index) (:mod:`bertkit.data.sampling`), so it is deterministic in (seed, epoch, index)
  whatever the worker, batch size, batch composition or resume point. A batch is drawn at once, vectorised
  in numpy (``__getitems__``, which the DataLoader calls; ``ds[i]`` is a batch of one). Per item, as the
  original: with ``short_seq_prob`` a shorter target length ``randint(2, max_num_tokens)``; a split point
  ``a_end`` among the chunk's sentences; B is the rest of the chunk, or (half the time, always for a
  one-sentence chunk) sentences from a random start in a random *other* document of the split until the
  target is reached; the pair is trimmed to the target, longer side first, with a random front/back
  split; masking picks
  ``min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))`` non-special positions (whole
  words with ``whole_word_mask``), 80% ``[MASK]`` / 10% random vocabulary id / 10% unchanged.
- ``no_nsp=True``: one contiguous segment ``[CLS] chunk [SEP]`` of up to ``max_seq_length - 2`` tokens
  (the paper's "No NSP" ablation); no ``next_sentence_label``.
- ``pack_documents=True`` (with ``no_nsp``; RoBERTa's FULL-SENTENCES): chunks are cut from all of a shard's
  documents read one after another, with a ``[SEP]`` where a document ends, so an instance fills the window
  across document boundaries; ``short_seq_prob`` does not apply (every instance is as long as its chunk).
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

import itertools
import math
import os
from collections.abc import Sequence

import numpy as np
import torch

from bertkit.data.sampling import draw_batch
from bertkit.data.shards import ShardSet
from bertkit.errors import UserError

__all__ = ["PretrainingDataset", "collate_pretraining", "EpochSampler", "InstanceBatch"]


class InstanceBatch(Sequence):
    """Items of one batch, held padded: ``padded`` (int64 [B, T] arrays, labels -100 and types/mask 0 on
    padding, ``next_sentence_label`` [B]; ``pad_id`` the id they are padded with) and ``lengths`` [B].

    :func:`collate_pretraining` only wraps the arrays; indexing gives item ``i`` as an unpadded dict (views
    of the arrays), built on demand, so a collate function that wants items gets them and the usual path
    builds none."""

    def __init__(self, padded: dict[str, np.ndarray], lengths: np.ndarray, pad_id: int = 0):
        self.padded, self.lengths, self.pad_id = padded, np.asarray(lengths, dtype=np.int64), pad_id

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = int(self.lengths[i])
        item = {k: v[i, :n] for k, v in self.padded.items() if v.ndim == 2 and k != "attention_mask"}
        if "next_sentence_label" in self.padded:
            item["next_sentence_label"] = self.padded["next_sentence_label"][i]
        return item


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
        pack_documents: bool = False,
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
        self.pack_documents = bool(pack_documents)
        if self.pack_documents and not self.no_nsp:
            raise UserError("pack_documents needs no_nsp: packed instances have one segment and no NSP label")
        self.whole_word_mask = bool(whole_word_mask)
        self.rank, self.world_size, self.split = int(rank), int(world_size), split
        self.epoch = 0

        words = self.shards.vocab_words()
        index = dict(zip(words, range(len(words))))  # a repeated token keeps its last id, as before
        self.vocab_size = len(words)
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = (
            index[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
        )
        self.is_continuation = np.fromiter(
            map(str.startswith, words, itertools.repeat("##")), dtype=bool, count=len(words)
        )
        self.max_num_tokens = self.max_seq_length - (2 if self.no_nsp else 3)

        n_docs = self.shards.documents
        if valid_documents is None:
            valid_documents = max(1, round(0.01 * n_docs)) if n_docs >= 2 else 0
        valid_documents = min(int(valid_documents), n_docs)
        self.valid_documents = valid_documents
        first_valid = n_docs - valid_documents
        lo, hi = {"train": (0, first_valid), "valid": (first_valid, n_docs), "all": (0, n_docs)}[split]
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
        c_shard, c_lo, c_hi, c_doc, c_start, c_end = [], [], [], [], [], []
        self.doc_start_tok: list[np.ndarray] = []  # per shard: first token of each of its split's documents
        for k, arr in enumerate(sh.arrays):
            mine = docs[sh.doc_shard[docs] == k]
            self.doc_start_tok.append(np.asarray(arr["sents"])[sh.doc_sent_lo[mine]].astype(np.int64))
            if mine.size == 0:
                continue
            sents = np.asarray(arr["sents"])
            s_lo, s_hi = sh.doc_sent_lo[mine], sh.doc_sent_hi[mine]
            counts = s_hi - s_lo
            sent_idx = np.repeat(s_lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            doc_of = np.repeat(mine, counts)
            starts_tok = sents[sent_idx]  # token offset of each sentence
            doc_start_tok = np.repeat(sents[s_lo], counts)
            if self.pack_documents:
                # the shard's documents as one stream with a separator after each: chunk number in the stream
                ordinal = np.repeat(np.arange(len(mine)), counts)
                group = (starts_tok - starts_tok[0] + ordinal) // t
                new = np.ones(len(sent_idx), dtype=bool)
                new[1:] = group[1:] != group[:-1]
            else:
                group = (starts_tok - doc_start_tok) // t  # chunk number within the document
                new = np.ones(len(sent_idx), dtype=bool)
                new[1:] = (doc_of[1:] != doc_of[:-1]) | (group[1:] != group[:-1])
            first = np.flatnonzero(new)
            last = np.append(first[1:], len(sent_idx))
            c_shard.append(np.full(len(first), k, dtype=np.int32))
            c_lo.append(sent_idx[first])
            c_hi.append(sent_idx[last - 1] + 1)
            c_doc.append(doc_of[first])
            c_start.append(starts_tok[first])  # token offsets of the chunk (saves two gathers per batch)
            c_end.append(sents[sent_idx[last - 1] + 1])
        self.chunk_shard = np.concatenate(c_shard)
        self.chunk_lo = np.concatenate(c_lo)
        self.chunk_hi = np.concatenate(c_hi)
        self.chunk_doc = np.concatenate(c_doc)
        self.chunk_start_tok = np.concatenate(c_start).astype(np.int64)
        self.chunk_end_tok = np.concatenate(c_end).astype(np.int64)
        order = np.argsort(self.chunk_doc, kind="stable")  # reading order across shards
        for name in ("chunk_shard", "chunk_lo", "chunk_hi", "chunk_doc", "chunk_start_tok", "chunk_end_tok"):
            setattr(self, name, getattr(self, name)[order])

    # --- Dataset API -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.per_rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> InstanceBatch:
        """Items ``indices`` drawn together, vectorised over the batch (the DataLoader calls this with each
        batch's indices). Each item equals ``self[i]``: it depends only on (seed, epoch, index)."""
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        if index.size == 0:
            return InstanceBatch({}, np.zeros(0, dtype=np.int64))
        if index.min() < 0 or index.max() >= self.per_rank:
            raise IndexError(int(index[(index < 0) | (index >= self.per_rank)][0]))
        epoch = 0 if self.split == "valid" else self.epoch
        padded = draw_batch(self, self.offset + index, epoch)
        lengths = padded.pop("lengths")
        padded["attention_mask"] = (np.arange(padded["input_ids"].shape[1]) < lengths[:, None]).astype(
            np.int64
        )
        return InstanceBatch(padded, lengths, pad_id=self.pad_id)

    def collate(self, batch: Sequence[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return collate_pretraining(batch, pad_id=self.pad_id)


def collate_pretraining(
    batch: Sequence[dict[str, np.ndarray]], pad_id: int = 0, pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """Pad items to the longest in the batch: input_ids/attention_mask/token_type_ids/labels [B,T] (long),
    next_sentence_label [B] (when the items have it). Padding: ``pad_id``, mask 0, type 0, label -100."""
    if not batch:
        raise ValueError("empty batch")
    padded = getattr(batch, "padded", None)
    if padded is not None and batch.pad_id == pad_id and pad_to_multiple_of is None:
        return {k: torch.from_numpy(v) for k, v in padded.items()}  # drawn padded already: no copies
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
