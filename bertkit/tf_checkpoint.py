"""Read the original google-research/bert TensorFlow checkpoints without TensorFlow.

A TF checkpoint ``PREFIX`` is a *tensor bundle*:

- ``PREFIX.index``: a LevelDB-format sorted table. Data blocks hold prefix-compressed
  ``key -> value`` entries with a restart array; an index block points at the data blocks; a 48-byte
  footer ends with the magic number 0xdb4775248b80fb57. Every block is followed by a 1-byte
  compression type (0 none, 1 snappy) and a masked CRC32C. The entry with the empty key is a
  ``BundleHeaderProto`` (num_shards, endianness); every other key is a variable name whose value is
  a ``BundleEntryProto`` (dtype, shape, shard_id, offset, size, crc32c).
- ``PREFIX.data-SSSSS-of-NNNNN``: the raw tensor bytes (little-endian), at ``offset`` / ``size``.

``convert_tf_checkpoint`` maps the TF variable names onto transformers' names (a rename table;
``kernel`` matrices are transposed, ``gamma/beta`` become ``weight/bias``, optimizer slots are
dropped) and writes a Hugging Face-layout directory.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import UserError

logger = logging.getLogger("bertkit")

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5
_CRC_MASK_DELTA = 0xA282EAD8

# TF DataType enum value -> numpy dtype (little-endian).
TF_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<f4"),  # DT_FLOAT
    2: np.dtype("<f8"),  # DT_DOUBLE
    3: np.dtype("<i4"),  # DT_INT32
    4: np.dtype("u1"),  # DT_UINT8
    5: np.dtype("<i2"),  # DT_INT16
    6: np.dtype("i1"),  # DT_INT8
    9: np.dtype("<i8"),  # DT_INT64
    10: np.dtype("?"),  # DT_BOOL
    14: np.dtype("<u2"),  # DT_BFLOAT16 (bit pattern; widened to float32 on read)
    17: np.dtype("<u2"),  # DT_UINT16
    19: np.dtype("<f2"),  # DT_HALF
    22: np.dtype("<u4"),  # DT_UINT32
    23: np.dtype("<u8"),  # DT_UINT64
}
DT_STRING = 7
DT_BFLOAT16 = 14


# ------------------------------------------------------------------ CRC32C


def _crc32c_table() -> list[int]:
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


try:  # a native implementation, when installed (the `tfrecord` extra); looked up once, not per call
    import google_crc32c as _native_crc32c  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    _native_crc32c = None


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli): native when google-crc32c is installed, else pure Python (~MB/s), which is
    fine for index blocks, small tensors and test-sized TFRecords."""
    if _native_crc32c is not None:
        return int(_native_crc32c.extend(crc, bytes(data)))
    table = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB/TF's masked CRC: rotate right by 15 bits and add a constant (mod 2**32)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------- protobuf


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos`` -> (value, next position)."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def protobuf_fields(buf: Any, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of the message in ``buf[start:end]``: an int for varints, the
    ``(start, end)`` of a length-delimited field (no copy: TFRecord reading stays zero-copy), raw bytes for
    fixed32/fixed64."""
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        key, pos = read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = read_varint(buf, pos)
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > end:
                raise ValueError("truncated field")
            val = (pos, pos + n)
            pos += n
        elif wire == 5:
            val = bytes(buf[pos : pos + 4])
            pos += 4
        elif wire == 1:
            val = bytes(buf[pos : pos + 8])
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > end:
            raise ValueError("truncated message")
        yield num, wire, val


def parse_protobuf(buf: bytes) -> dict[int, list[Any]]:
    """Field number -> list of raw values (ints for varint/fixed, bytes for length-delimited)."""
    fields: dict[int, list[Any]] = {}
    for number, wire, value in protobuf_fields(buf):
        if wire == 2:
            value = bytes(buf[value[0] : value[1]])
        elif wire in (1, 5):
            value = int.from_bytes(value, "little")
        fields.setdefault(number, []).append(value)
    return fields


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass
class BundleEntry:
    """Where one tensor lives: dtype (TF enum), shape, shard, byte offset and size, masked crc."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int | None
    sliced: bool = False

    @classmethod
    def parse(cls, name: str, value: bytes) -> BundleEntry:
        f = parse_protobuf(value)
        shape: list[int] = []
        for shape_msg in f.get(2, []):
            for dim_msg in parse_protobuf(shape_msg).get(2, []):
                shape.append(_signed64(parse_protobuf(dim_msg).get(1, [0])[0]))
        return cls(
            name=name,
            dtype=f.get(1, [0])[0],
            shape=tuple(shape),
            shard_id=f.get(3, [0])[0],
            offset=_signed64(f.get(4, [0])[0]),
            size=_signed64(f.get(5, [0])[0]),
            crc32c=f.get(6, [None])[0],
            sliced=bool(f.get(7)),
        )


# ------------------------------------------------------------ LevelDB table


def _snappy_decompress(data: bytes) -> bytes:
    """Raw snappy format (a varint length, then literal and copy elements)."""
    n, pos = read_varint(data, 0)
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                length = int.from_bytes(data[pos : pos + extra], "little")
                pos += extra
            length += 1
            out += data[pos : pos + length]
            pos += length
            continue
        if kind == 1:
            length = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[pos : pos + 2], "little")
            pos += 2
        else:
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        if offset == 0 or offset > len(out):
            raise ValueError("bad snappy copy offset")
        for _ in range(length):  # copies may overlap their own output
            out.append(out[-offset])
    if len(out) != n:
        raise ValueError("snappy length mismatch")
    return bytes(out)


def _read_block(data: bytes, offset: int, size: int, where: str, verify: bool) -> bytes:
    end = offset + size
    if end + BLOCK_TRAILER_SIZE > len(data):
        raise UserError(f"{where}: block at {offset}+{size} runs past the end of the file (truncated?)")
    contents = data[offset:end]
    kind = data[end]
    if verify:
        (stored,) = struct.unpack_from("<I", data, end + 1)
        actual = mask_crc(crc32c(data[offset : end + 1]))
        if stored != actual:
            raise UserError(f"{where}: block at offset {offset} fails its CRC32C check (corrupt file)")
    if kind == 0:
        return contents
    if kind == 1:
        return _snappy_decompress(contents)
    raise UserError(f"{where}: unknown block compression type {kind}")


def _block_entries(block: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """Decode one block's (key, value) entries; keys are prefix-compressed against the previous one."""
    if len(block) < 4:
        raise UserError(f"{where}: block too small")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise UserError(f"{where}: bad restart count {num_restarts}")
    entries: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = read_varint(block, pos)
        non_shared, pos = read_varint(block, pos)
        value_len, pos = read_varint(block, pos)
        if shared > len(key) or pos + non_shared + value_len > limit:
            raise UserError(f"{where}: corrupt block entry at byte {pos}")
        key = key[:shared] + block[pos : pos + non_shared]
        pos += non_shared
        entries.append((key, block[pos : pos + value_len]))
        pos += value_len
    return entries


def read_table(path: str | os.PathLike, verify: bool = True) -> list[tuple[bytes, bytes]]:
    """All (key, value) pairs of a LevelDB-format table file, in key order."""
    path = Path(path)
    data = path.read_bytes()
    where = str(path)
    if len(data) < FOOTER_SIZE:
        raise UserError(f"{where}: too small to be a TF checkpoint index ({len(data)} bytes)")
    (magic,) = struct.unpack_from("<Q", data, len(data) - 8)
    if magic != TABLE_MAGIC:
        raise UserError(f"{where}: not a TF checkpoint index (bad magic number {magic:#x})")
    footer = data[len(data) - FOOTER_SIZE :]
    _, pos = read_varint(footer, 0)  # metaindex offset
    _, pos = read_varint(footer, pos)  # metaindex size
    index_offset, pos = read_varint(footer, pos)
    index_size, pos = read_varint(footer, pos)
    index_block = _read_block(data, index_offset, index_size, where, verify)
    out: list[tuple[bytes, bytes]] = []
    for _, handle in _block_entries(index_block, where):
        off, p = read_varint(handle, 0)
        size, _ = read_varint(handle, p)
        out.extend(_block_entries(_read_block(data, off, size, where, verify), where))
    return out


# ----------------------------------------------------------- tensor bundle


def checkpoint_prefix(path: str | os.PathLike) -> Path:
    """Resolve a checkpoint directory or prefix (``.../bert_model.ckpt``) to the prefix."""
    path = Path(path)
    if path.name.endswith(".index") and path.is_file():
        return path.with_suffix("")
    if Path(str(path) + ".index").is_file():
        return path
    if path.is_dir():
        state = path / "checkpoint"
        if state.is_file():  # TF's "checkpoint" state file: model_checkpoint_path: "..."
            m = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', state.read_text(encoding="utf-8"), re.M)
            if m:
                candidate = Path(m.group(1))
                candidate = candidate if candidate.is_absolute() else path / candidate
                if Path(str(candidate) + ".index").is_file():
                    return candidate
        indexes = sorted(path.glob("*.index"))
        if len(indexes) == 1:
            return indexes[0].with_suffix("")
        if len(indexes) > 1:
            names = ", ".join(p.name for p in indexes)
            raise UserError(
                f"{path}: several checkpoints ({names}); pass the prefix, e.g. {indexes[-1].with_suffix('')}"
            )
    raise UserError(
        f"{path}: no TensorFlow checkpoint found (expected PREFIX.index and PREFIX.data-00000-of-00001, "
        "e.g. bert_model.ckpt.index)"
    )


class TFCheckpointReader:
    """Read tensors of a TF2/TF1 (V2 format) checkpoint by name, without TensorFlow."""

    def __init__(self, path: str | os.PathLike, verify_index: bool = True) -> None:
        self.prefix = checkpoint_prefix(path)
        index = Path(str(self.prefix) + ".index")
        self.num_shards = 1
        self.entries: dict[str, BundleEntry] = {}
        for key, value in read_table(index, verify=verify_index):
            if key == b"":
                header = parse_protobuf(value)
                self.num_shards = header.get(1, [1])[0]
                if header.get(2, [0])[0] != 0:
                    raise UserError(f"{index}: big-endian checkpoints are not supported")
                continue
            name = key.decode("utf-8")
            try:
                self.entries[name] = BundleEntry.parse(name, value)
            except (ValueError, struct.error) as e:
                raise UserError(f"{index}: entry {name!r} is not a valid BundleEntryProto ({e})") from None
        self._shards: dict[int, np.memmap] = {}

    def keys(self) -> list[str]:
        return list(self.entries)

    def _shard(self, shard_id: int) -> np.memmap:
        if shard_id not in self._shards:
            path = Path(f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}")
            if not path.is_file():
                raise UserError(f"{path}: checkpoint data file missing")
            self._shards[shard_id] = np.memmap(path, dtype=np.uint8, mode="r")
        return self._shards[shard_id]

    def get_tensor(self, name: str, verify: bool = False) -> np.ndarray:
        """The tensor ``name`` as a numpy array (bfloat16 widened to float32).

        ``verify`` checks the entry's CRC32C (pure Python: slow for large tensors).
        """
        if name not in self.entries:
            raise KeyError(f"{name!r} is not in {self.prefix}")
        e = self.entries[name]
        if e.sliced:
            raise UserError(f"{self.prefix}: {name} is a partitioned variable; not supported")
        if e.dtype == DT_STRING or e.dtype not in TF_DTYPES:
            raise UserError(f"{self.prefix}: {name} has TF dtype {e.dtype}, which bertkit does not read")
        dtype = TF_DTYPES[e.dtype]
        count = int(np.prod(e.shape, dtype=np.int64)) if e.shape else 1
        if count * dtype.itemsize != e.size:
            raise UserError(
                f"{self.prefix}: {name}: {e.size} bytes stored but shape {e.shape} of {dtype} needs "
                f"{count * dtype.itemsize}"
            )
        shard = self._shard(e.shard_id)
        if e.offset + e.size > len(shard):
            raise UserError(f"{self.prefix}: {name} lies past the end of the data file (truncated?)")
        raw = shard[e.offset : e.offset + e.size]
        if verify and e.crc32c is not None:
            crc = crc32c(raw.tobytes())
            if e.crc32c not in (mask_crc(crc), crc):
                raise UserError(f"{self.prefix}: {name} fails its CRC32C check (corrupt data file)")
        arr = np.frombuffer(raw.tobytes(), dtype=dtype).reshape(e.shape)
        if e.dtype == DT_BFLOAT16:
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr


# ------------------------------------------------------------- name mapping

_SKIP = re.compile(
    r"(^|/)(adam_m|adam_v|Adam|Adam_1|global_step|beta1_power|beta2_power|bad_steps|good_steps|loss_scale)(/|$)"
)

Rename = tuple[re.Pattern[str], str, bool]


def _dense(tf: str, hf: str) -> list[Rename]:
    """A TF dense layer's ``kernel`` ([in, out]: transposed to the weight) and ``bias``."""
    return [
        (re.compile(rf"^{tf}/kernel$"), f"{hf}.weight", True),
        (re.compile(rf"^{tf}/bias$"), f"{hf}.bias", False),
    ]


def _norm(tf: str, hf: str) -> list[Rename]:
    """A TF LayerNorm's ``gamma`` and ``beta``: the weight and the bias."""
    return [
        (re.compile(rf"^{tf}/gamma$"), f"{hf}.weight", False),
        (re.compile(rf"^{tf}/beta$"), f"{hf}.bias", False),
    ]


_LAYER = r"bert/encoder/layer_(\d+)"

# (TF name regex, HF name template, transpose?) - first match wins.
RENAMES: list[Rename] = [
    (
        re.compile(r"^bert/embeddings/(word|position|token_type)_embeddings$"),
        r"bert.embeddings.\1_embeddings.weight",
        False,
    ),
    *_norm("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm"),
    *_dense(rf"{_LAYER}/attention/self/(query|key|value)", r"bert.encoder.layer.\1.attention.self.\2"),
    *_dense(rf"{_LAYER}/(attention/output|intermediate|output)/dense", r"bert.encoder.layer.\1.\2.dense"),
    *_norm(rf"{_LAYER}/(attention/output|output)/LayerNorm", r"bert.encoder.layer.\1.\2.LayerNorm"),
    *_dense("bert/pooler/dense", "bert.pooler.dense"),
    *_dense("cls/predictions/transform/dense", "cls.predictions.transform.dense"),
    *_norm("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm"),
    (re.compile(r"^cls/predictions/output_bias$"), "cls.predictions.bias", False),
    # [out, in] already: the original code multiplies by the transpose.
    (re.compile(r"^cls/seq_relationship/output_weights$"), "cls.seq_relationship.weight", False),
    (re.compile(r"^cls/seq_relationship/output_bias$"), "cls.seq_relationship.bias", False),
    # run_classifier.py / run_squad.py fine-tuned heads.
    (re.compile(r"^output_weights$"), "classifier.weight", False),
    (re.compile(r"^output_bias$"), "classifier.bias", False),
    (re.compile(r"^cls/squad/output_weights$"), "qa_outputs.weight", False),
    (re.compile(r"^cls/squad/output_bias$"), "qa_outputs.bias", False),
]


def tf_to_hf_name(name: str) -> tuple[str | None, bool]:
    """(HF parameter name or None to skip, whether to transpose)."""
    if _SKIP.search(name):
        return None, False
    for pattern, template, transpose in RENAMES:
        if pattern.match(name):
            return pattern.sub(template, name).replace("/", "."), transpose
    return None, False


def load_tf_state_dict(
    path: str | os.PathLike, verify_crc: bool = False
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF-named tensors of a TF BERT checkpoint, and the TF names that were not used."""
    reader = TFCheckpointReader(path)
    state: dict[str, torch.Tensor] = {}
    unused: list[str] = []
    for name in sorted(reader.entries):
        target, transpose = tf_to_hf_name(name)
        if target is None:
            if not _SKIP.search(name):
                unused.append(name)
            continue
        arr = reader.get_tensor(name, verify=verify_crc)
        if transpose:
            arr = arr.T
        state[target] = torch.from_numpy(np.array(arr, dtype=np.float32, order="C", copy=True))
    return state, unused


def guess_lowercase(ckpt_dir: Path) -> bool | None:
    """``uncased_L-12_H-768_A-12`` -> True, ``cased_L-12...`` -> False, unknown -> None."""
    for part in reversed(ckpt_dir.resolve().parts[-2:]):  # the checkpoint's folder, then its parent
        low = part.lower()
        if "uncased" in low:
            return True
        if re.search(r"(^|[^a-z])cased", low):
            return False
    return None


def convert_tf_checkpoint(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    lowercase: bool | None = None,
    config_file: str | os.PathLike | None = None,
    vocab_file: str | os.PathLike | None = None,
    verify_crc: bool = False,
) -> dict[str, Any]:
    """Convert a google-research/bert checkpoint directory into a Hugging Face-layout directory.

    Writes ``config.json`` (from ``bert_config.json``), ``model.safetensors``, ``vocab.txt``,
    ``tokenizer_config.json``. ``lowercase=None`` guesses from the directory name (uncased/cased).
    """
    from .checkpoint import SAFETENSORS, save_state_dict
    from .config import BertConfig
    from .io import atomic_dir, read_json
    from .tokenizer import Tokenizer

    prefix = checkpoint_prefix(ckpt)
    ckpt_dir = prefix.parent
    config_path = Path(config_file) if config_file else ckpt_dir / "bert_config.json"
    vocab_path = Path(vocab_file) if vocab_file else ckpt_dir / "vocab.txt"
    if not config_path.is_file():
        raise UserError(f"{config_path}: bert_config.json not found; pass --config")
    if not vocab_path.is_file():
        raise UserError(f"{vocab_path}: vocab.txt not found; pass --vocab")
    raw_cfg = read_json(config_path, "bert_config.json")
    raw_cfg.setdefault("model_type", "bert")
    raw_cfg.setdefault("layer_norm_eps", 1e-12)
    raw_cfg.setdefault("pad_token_id", 0)
    for key in (
        "directionality",
        "pooler_fc_size",
        "pooler_num_attention_heads",
        "pooler_num_fc_layers",
        "pooler_size_per_head",
        "pooler_type",
    ):
        raw_cfg.pop(key, None)  # leftovers of the multilingual/Chinese configs
    try:
        config = BertConfig.from_dict(raw_cfg)
    except (TypeError, ValueError) as e:
        raise UserError(f"{config_path}: {e}") from None

    state, unused = load_tf_state_dict(prefix, verify_crc=verify_crc)
    if "bert.embeddings.word_embeddings.weight" not in state:
        raise UserError(f"{prefix}: no bert/embeddings/word_embeddings variable: not a BERT checkpoint")
    vocab_rows = state["bert.embeddings.word_embeddings.weight"].shape[0]
    if vocab_rows != config.vocab_size:
        raise UserError(
            f"{config_path}: vocab_size {config.vocab_size} but the checkpoint has {vocab_rows} embedding rows"
        )
    if unused:
        logger.warning("TF variables not converted: %s", ", ".join(unused))
    if "classifier.weight" in state:
        config.num_labels = state["classifier.weight"].shape[0]
        arch = "BertForSequenceClassification"
    elif "qa_outputs.weight" in state:
        arch = "BertForQuestionAnswering"
    elif "cls.seq_relationship.weight" in state:
        arch = "BertForPreTraining"
    elif "cls.predictions.bias" in state:
        arch = "BertForMaskedLM"
    else:
        arch = "BertModel"
        state = {k.removeprefix("bert."): v for k, v in state.items()}
    config.architectures = [arch]

    guessed = guess_lowercase(ckpt_dir)
    if lowercase is None:
        lowercase = True if guessed is None else guessed
        if guessed is None:
            logger.warning(
                "%s: cannot tell cased from uncased by the name; assuming uncased (pass --cased)", ckpt_dir
            )
    tokenizer = Tokenizer(vocab_path, lowercase=lowercase, model_max_length=config.max_position_embeddings)
    if len(tokenizer) != config.vocab_size:
        logger.warning("%s has %d tokens but vocab_size is %d", vocab_path, len(tokenizer), config.vocab_size)

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        config.save_pretrained(tmp)
        save_state_dict(state, tmp / SAFETENSORS)
        tokenizer.save_pretrained(tmp)
    return {
        "checkpoint": str(prefix),
        "out_dir": str(out_dir),
        "architecture": arch,
        "tensors": len(state),
        "parameters": int(sum(t.numel() for t in state.values())),
        "lowercase": lowercase,
        "skipped_unknown": unused,
    }


__all__ = [
    "RENAMES",
    "TABLE_MAGIC",
    "BundleEntry",
    "TFCheckpointReader",
    "checkpoint_prefix",
    "convert_tf_checkpoint",
    "crc32c",
    "guess_lowercase",
    "load_tf_state_dict",
    "mask_crc",
    "parse_protobuf",
    "protobuf_fields",
    "read_table",
    "read_varint",
    "tf_to_hf_name",
]
