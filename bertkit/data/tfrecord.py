"""Reading the original release's pre-training TFRecord files without TensorFlow.

A TFRecord file is a sequence of records, each::

    uint64 length (little-endian) | uint32 masked CRC32C of the 8 length bytes | data | uint32 masked CRC32C of data

with ``masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`` (mod 2**32). ``create_pretraining_data.py`` writes
one ``tf.train.Example`` protobuf per record, whose features are ``input_ids``, ``input_mask``,
``segment_ids``, ``masked_lm_positions``, ``masked_lm_ids``, ``next_sentence_labels`` (int64 lists) and
``masked_lm_weights`` (float list). :func:`parse_example` decodes that message with a small protobuf
wire-format reader (``Example.features`` = field 1, ``Features.feature`` = a map entry, field 1; each entry's
key = 1, value = 2; ``Feature`` holds ``bytes_list`` = 1, ``float_list`` = 2 or ``int64_list`` = 3, each
with repeated ``value`` = 1, packed or not).

:class:`TFRecordFile` indexes a file's record offsets in one pass (checking every CRC), then reads any
record on demand from a memory map, so files larger than memory can be trained on. CRC32C comes from
``google-crc32c`` (C; ``pip install 'bertkit[tfrecord]'``) when installed, otherwise from a table in
Python (the same values, far slower on large files).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np

from bertkit.errors import UserError
from bertkit.tf_checkpoint import _signed64, crc32c, mask_crc
from bertkit.tf_checkpoint import protobuf_fields as _fields
from bertkit.tf_checkpoint import read_varint as _varint

__all__ = ["TFRecordFile", "masked_crc32c", "parse_example"]


def masked_crc32c(data: bytes) -> int:
    """The masked CRC TFRecord stores (so that a CRC of data holding CRCs is not degenerate)."""
    return mask_crc(crc32c(data))


# ------------------------------------------------------------------------------------------------ protobuf


def _int64_list(buf, start: int, end: int) -> list[int]:
    out: list[int] = []
    for num, wire, val in _fields(buf, start, end):
        if num != 1:
            continue
        if wire == 2:  # packed
            p, b = val  # type: ignore[misc]
            while p < b:
                v, p = _varint(buf, p)
                out.append(_signed64(v))
        elif wire == 0:
            out.append(_signed64(int(val)))  # type: ignore[arg-type]
    return out


def _float_list(buf, start: int, end: int) -> list[float]:
    out: list[float] = []
    for num, wire, val in _fields(buf, start, end):
        if num != 1:
            continue
        if wire == 2:
            a, b = val  # type: ignore[misc]
            out.extend(np.frombuffer(bytes(buf[a:b]), dtype="<f4").tolist())
        elif wire == 5:
            out.append(struct.unpack("<f", val)[0])  # type: ignore[arg-type]
    return out


def _bytes_list(buf, start: int, end: int) -> list[bytes]:
    return [bytes(buf[v[0] : v[1]]) for num, wire, v in _fields(buf, start, end) if num == 1 and wire == 2]  # type: ignore[index]


_LISTS = {1: _bytes_list, 2: _float_list, 3: _int64_list}  # Feature's fields: bytes, float, int64 lists


def parse_example(buf: bytes | memoryview) -> dict[str, list]:
    """A serialised ``tf.train.Example`` as ``{feature name: list of ints / floats / bytes}``."""
    feats: dict[str, list] = {}
    for num, wire, val in _fields(buf):
        if num != 1 or wire != 2:
            continue  # Example.features
        a, b = val  # type: ignore[misc]
        for fnum, fwire, entry in _fields(buf, a, b):
            if fnum != 1 or fwire != 2:
                continue  # Features.feature (map entry)
            key, value = None, None
            for enum_, ewire, ev in _fields(buf, *entry):  # type: ignore[misc]
                if enum_ == 1 and ewire == 2:
                    key = bytes(buf[ev[0] : ev[1]]).decode("utf-8")  # type: ignore[index]
                elif enum_ == 2 and ewire == 2:
                    value = ev
            if key is None:
                continue
            values: list = []
            if value is not None:
                for knum, kwire, kv in _fields(buf, *value):  # type: ignore[misc]
                    parse = _LISTS.get(knum) if kwire == 2 else None
                    if parse is not None:
                        values = parse(buf, *kv)  # type: ignore[misc]
            feats[key] = values
    return feats


# ------------------------------------------------------------------------------------------------ records


class TFRecordFile:
    """The records of one TFRecord file, indexed once (every CRC checked) and read on demand.

    ``len(f)`` records; ``f[i]`` is record ``i``'s bytes; ``f.example(i)`` its parsed ``tf.train.Example``.
    A truncated file or a CRC mismatch raises :class:`~bertkit.errors.UserError` naming the file, the record
    and its byte offset. Compressed (GZIP/ZLIB) TFRecords are not read: decompress them first.
    """

    def __init__(self, path: str | os.PathLike, verify: bool = True):
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"{self.path}: TFRecord file not found")
        size = self.path.stat().st_size
        self._file = open(self.path, "rb")  # noqa: SIM115 - held for the memory map's lifetime
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        starts, lengths = [], []
        pos = 0
        buf = self._map
        while pos < size:
            if pos + 12 > size:
                self._bad(len(starts), pos, "truncated record header")
            header = buf[pos : pos + 8]
            (n,) = struct.unpack("<Q", header)
            (hcrc,) = struct.unpack("<I", buf[pos + 8 : pos + 12])
            if verify and masked_crc32c(header) != hcrc:
                self._bad(len(starts), pos, "length CRC mismatch (not a TFRecord file, or a compressed one?)")
            if pos + 12 + n + 4 > size:
                self._bad(len(starts), pos, f"truncated record (needs {n} bytes of data)")
            if verify:
                (dcrc,) = struct.unpack("<I", buf[pos + 12 + n : pos + 16 + n])
                if masked_crc32c(buf[pos + 12 : pos + 12 + n]) != dcrc:
                    self._bad(len(starts), pos, "data CRC mismatch (the file is corrupt)")
            starts.append(pos + 12)
            lengths.append(n)
            pos += 16 + n
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)

    def _bad(self, record: int, offset: int, what: str):
        raise UserError(
            f"{self.path}: record {record} at byte {offset}: {what}; regenerate the file or drop it from --data"
        )

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> bytes:
        a = int(self.starts[i])
        return self._map[a : a + int(self.lengths[i])]

    def example(self, i: int) -> dict[str, list]:
        try:
            return parse_example(self[i])
        except ValueError as e:
            raise UserError(f"{self.path}: record {i} is not a tf.train.Example ({e})") from None

    def close(self) -> None:
        if isinstance(self._map, mmap.mmap):
            self._map.close()
        self._file.close()
