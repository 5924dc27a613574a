"""Fixed pre-training instances, read as the original ``run_pretraining.py`` reads them.

Two sources hold the original's features (``input_ids``, ``input_mask``, ``segment_ids`` [N, T],
``masked_lm_positions``, ``masked_lm_ids``, ``masked_lm_weights`` [N, P] padded to ``max_predictions_per_seq``
with weight 0, ``next_sentence_labels`` [N], 1 = B is a random sentence):

- ``static_instances.npz`` written by ``bertkit prepare --static`` (instance-identical to
  ``create_pretraining_data.py``), loaded into memory;
- the original release's TFRecord files (:mod:`bertkit.data.tfrecord`), read record by record on demand.

Item ``i`` is instance ``i`` with the padding cut off (``input_mask`` gives its length) and its masked
positions turned into per-token ``labels`` (-100 where nothing is predicted: positions of weight 0 are the
padding of ``max_predictions_per_seq``), the layout of :func:`bertkit.data.dynamic.collate_pretraining`. The
masked-LM loss is then the mean cross-entropy over the weighted positions of the batch, which is the
original's ``sum(w * nll) / (sum(w) + 1e-5)`` without the 1e-5. Epochs go over the same fixed instances
(each epoch in a new order: :class:`bertkit.train.Batches`), as the original repeats its files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from bertkit.data.dynamic import collate_pretraining
from bertkit.errors import UserError

__all__ = ["FEATURES", "StaticPretrainingDataset", "find_tfrecords"]

FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


def find_tfrecords(path: str | os.PathLike) -> list[Path]:
    """A TFRecord file, or every ``*.tfrecord*`` / ``*.tfr`` file of a directory (sorted)."""
    p = Path(path)
    if p.is_file():
        return [p]
    files = sorted(f for f in p.glob("*") if f.is_file() and (".tfrecord" in f.name or f.suffix == ".tfr"))
    if not files:
        raise UserError(f"{p}: no TFRecord files (*.tfrecord*, *.tfr) there")
    return files


class StaticPretrainingDataset(torch.utils.data.Dataset):
    """Fixed masked-LM / next-sentence instances; ``ds[i]`` is a dict of numpy int64 arrays (unpadded)."""

    def __init__(
        self, source, name: str, no_nsp: bool = False, pad_id: int = 0, vocab_size: int | None = None
    ):
        """``source``: a dict of the feature arrays, or a list of :class:`~bertkit.data.tfrecord.TFRecordFile`.
        ``vocab_size``: when known, token ids at or above it are refused (else only negative ones)."""
        self.name = name
        self.no_nsp = no_nsp
        self.pad_id = pad_id
        self.vocab_size = vocab_size
        if isinstance(source, dict):
            missing = [k for k in FEATURES if k not in source]
            if missing:
                raise UserError(f"{name}: missing feature(s) {missing}; expected {list(FEATURES)}")
            self.arrays = source
            self.files = None
            self._n = len(source["input_ids"])
            self.max_seq_length = int(source["input_ids"].shape[1])
            self.max_predictions_per_seq = int(source["masked_lm_positions"].shape[1])
        else:
            self.arrays = None
            self.files = list(source)
            self._cum = np.cumsum([0] + [len(f) for f in self.files])
            self._n = int(self._cum[-1])
            if self._n:
                first = self._raw(0)
                self.max_seq_length = len(first["input_ids"])
                self.max_predictions_per_seq = len(first["masked_lm_positions"])
        if self._n == 0:
            raise UserError(f"{name}: no instances")

    @classmethod
    def from_npz(cls, path: str | os.PathLike, **kw) -> StaticPretrainingDataset:
        path = Path(path)
        if not path.is_file():
            raise UserError(
                f"{path}: static instances not found (write them with `bertkit prepare --static`)"
            )
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise UserError(f"{path}: not a static-instances .npz ({e})") from None
        return cls(arrays, str(path), **kw)

    @classmethod
    def from_tfrecords(cls, path: str | os.PathLike, verify: bool = True, **kw) -> StaticPretrainingDataset:
        from bertkit.data.tfrecord import TFRecordFile

        files = [TFRecordFile(f, verify=verify) for f in find_tfrecords(path)]
        return cls(files, str(path), **kw)

    def __len__(self) -> int:
        return self._n

    def _raw(self, i: int) -> dict[str, np.ndarray]:
        if self.arrays is not None:
            return {k: self.arrays[k][i] for k in FEATURES}
        f = int(np.searchsorted(self._cum, i, side="right")) - 1
        tf = self.files[f]
        ex = tf.example(i - int(self._cum[f]))
        missing = [k for k in FEATURES if k not in ex]
        if missing:
            raise UserError(
                f"{tf.path}: record {i - int(self._cum[f])} lacks {missing}; not a pre-training TFRecord "
                "of create_pretraining_data.py"
            )
        return {k: np.asarray(ex[k]) for k in FEATURES}

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if not 0 <= i < self._n:
            raise IndexError(i)
        r = self._raw(int(i))
        n = int(np.asarray(r["input_mask"]).sum())
        ids = np.asarray(r["input_ids"], dtype=np.int64)[:n]
        labels = np.full(n, -100, dtype=np.int64)
        w = np.asarray(r["masked_lm_weights"], dtype=np.float64)
        pos = np.asarray(r["masked_lm_positions"], dtype=np.int64)[w > 0]
        if not np.all((w == 0) | (w == 1)):
            raise UserError(f"{self.name}: instance {i}: masked_lm_weights must be 0 or 1")
        if pos.size and (pos.max() >= n or pos.min() < 0):
            raise UserError(f"{self.name}: instance {i}: a masked position lies outside its {n} tokens")
        labels[pos] = np.asarray(r["masked_lm_ids"], dtype=np.int64)[w > 0]
        item = {
            "input_ids": ids,
            "token_type_ids": np.asarray(r["segment_ids"], dtype=np.int64)[:n],
            "labels": labels,
        }
        if not self.no_nsp:
            item["next_sentence_label"] = np.int64(np.asarray(r["next_sentence_labels"]).reshape(-1)[0])
        self._check_ranges(i, item)
        return item

    def _check_ranges(self, i: int, item: dict[str, np.ndarray]) -> None:
        """Values the model would index with: out of range they fail deep in an embedding lookup or the loss
        (a file can have valid checksums and still hold them)."""
        top = self.vocab_size
        for what, ids in (
            ("input id", item["input_ids"]),
            ("masked id", item["labels"][item["labels"] != -100]),
        ):
            bad = ids[(ids < 0) | (ids >= top)] if top is not None else ids[ids < 0]
            if bad.size:
                limit = f"0..{top - 1}" if top is not None else ">= 0"
                raise UserError(f"{self.name}: instance {i}: {what} {int(bad[0])} is outside {limit}")
        seg = item["token_type_ids"]
        if seg.size and (seg.min() < 0 or seg.max() > 1):
            raise UserError(f"{self.name}: instance {i}: segment ids must be 0 or 1, found {int(seg.max())}")
        nsp = item.get("next_sentence_label")
        if nsp is not None and nsp not in (0, 1):
            raise UserError(f"{self.name}: instance {i}: next_sentence_labels must be 0 or 1, got {int(nsp)}")

    def collate(self, batch: Sequence[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return collate_pretraining(batch, pad_id=self.pad_id)


DATA_FORMATS = ("auto", "dynamic", "static", "tfrecord")
STATIC_FILE = "static_instances.npz"


def detect_format(path: str | os.PathLike, requested: str = "auto") -> str:
    """Which stream ``--data PATH`` is: ``dynamic`` (a ``bertkit prepare`` dir), ``static`` (its
    ``static_instances.npz``, or an ``.npz`` file) or ``tfrecord`` (TFRecord file(s)). ``auto`` takes a prepared
    dir's static instances when ``prepare --static`` wrote them (the user asked for the original's stream)."""
    if requested not in DATA_FORMATS:
        raise UserError(f"--data-format {requested!r}: use one of {', '.join(DATA_FORMATS)}")
    p = Path(path)
    if not p.exists():
        raise UserError(f"--data {p}: not found")
    if requested != "auto":
        return requested
    if p.is_file():
        return "static" if p.suffix == ".npz" else "tfrecord"
    if (p / STATIC_FILE).is_file():
        return "static"
    if (p / "manifest.json").is_file():
        return "dynamic"
    return "tfrecord"


def open_static(path: str | os.PathLike, fmt: str, no_nsp: bool, pad_id: int) -> StaticPretrainingDataset:
    """The fixed instances at ``path`` (``fmt`` ``static`` or ``tfrecord``)."""
    p = Path(path)
    vocab = (p if p.is_dir() else p.parent) / "vocab.txt"  # the vocabulary the ids refer to, when beside them
    size = sum(1 for _ in vocab.open(encoding="utf-8", errors="replace")) if vocab.is_file() else None
    kw = {"no_nsp": no_nsp, "pad_id": pad_id, "vocab_size": size}
    if fmt == "static":
        return StaticPretrainingDataset.from_npz(p / STATIC_FILE if p.is_dir() else p, **kw)
    return StaticPretrainingDataset.from_tfrecords(p, **kw)
