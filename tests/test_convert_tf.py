"""TF checkpoint reading without TensorFlow: a tiny tensor-bundle writer (LevelDB table + protobuf by hand)
produces a checkpoint with the original release's variable names; `bertkit convert tf` must turn it into a
directory that bertkit and transformers load with outputs identical to the model the arrays came from."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main as cli_main
from bertkit.errors import UserError
from bertkit.tf_checkpoint import (
    TFCheckpointReader,
    _snappy_decompress,
    crc32c,
    guess_lowercase,
    mask_crc,
    read_table,
)

MAGIC = 0xDB4775248B80FB57
DT = {np.dtype("float32"): 1, np.dtype("int64"): 9, np.dtype("int32"): 3}


# --------------------------------------------------------------- the writer


def _crc32c_bitwise(data: bytes) -> int:  # independent of the library's table-driven version
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _mask(crc: int) -> int:
    rot = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return (rot + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field_varint(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def _field_bytes(num: int, payload: bytes) -> bytes:
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def _entry_proto(arr: np.ndarray, offset: int, crc: int) -> bytes:
    shape = b"".join(_field_bytes(2, _field_varint(1, d)) for d in arr.shape)
    msg = _field_varint(1, DT[arr.dtype]) + _field_bytes(2, shape)
    msg += _field_varint(4, offset) if offset else b""  # proto3 omits zero defaults (shard_id too)
    msg += _field_varint(5, arr.nbytes)
    msg += _varint((6 << 3) | 5) + struct.pack("<I", crc)
    return msg


def _block(entries: list[tuple[bytes, bytes]], restart_interval: int) -> bytes:
    out = bytearray()
    restarts: list[int] = []
    prev = b""
    for i, (key, value) in enumerate(entries):
        if i % restart_interval == 0:
            restarts.append(len(out))
            shared = 0
        else:
            shared = 0
            while shared < min(len(prev), len(key)) and prev[shared] == key[shared]:
                shared += 1
        out += _varint(shared) + _varint(len(key) - shared) + _varint(len(value))
        out += key[shared:] + value
        prev = key
    if not restarts:
        restarts = [0]
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _table(entries: list[tuple[bytes, bytes]], block_size: int = 200) -> bytes:
    """A LevelDB-format table: data blocks (restart every 3 keys), empty metaindex, index, footer."""
    out = bytearray()

    def emit(contents: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(contents))
        trailer = b"\x00"  # no compression
        out.extend(contents + trailer + struct.pack("<I", _mask(_crc32c_bitwise(contents + trailer))))
        return handle

    index: list[tuple[bytes, bytes]] = []
    pending: list[tuple[bytes, bytes]] = []
    for key, value in entries:
        pending.append((key, value))
        if sum(len(k) + len(v) for k, v in pending) >= block_size:
            index.append((key, emit(_block(pending, 3))))
            pending = []
    if pending:
        index.append((pending[-1][0], emit(_block(pending, 3))))
    meta_handle = emit(_block([], 1))
    index_handle = emit(_block(index, 1))
    footer = (meta_handle + index_handle).ljust(40, b"\x00") + struct.pack("<Q", MAGIC)
    return bytes(out + footer)


def write_tf_checkpoint(prefix: Path, tensors: dict[str, np.ndarray]) -> None:
    data = bytearray()
    entries = [(b"", _field_varint(1, 1) + _field_bytes(3, _field_varint(1, 1)))]  # header: 1 shard
    for name in sorted(tensors):
        arr = np.asarray(tensors[name], order="C")  # (ascontiguousarray would make scalars 1-D)
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        entries.append((name.encode(), _entry_proto(arr, len(data), _mask(_crc32c_bitwise(raw)))))
        data += raw
    entries.sort(key=lambda kv: kv[0])
    Path(str(prefix) + ".index").write_bytes(_table(entries))
    Path(str(prefix) + ".data-00000-of-00001").write_bytes(bytes(data))


# ------------------------------------------------- a tiny BERT in TF names

TINY = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=24,
    type_vocab_size=2,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    initializer_range=0.02,
)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]


def _hf_reference():
    """A random transformers BertForPreTraining and its weights under the original TF names."""
    from transformers import BertConfig as HFConfig
    from transformers import BertForPreTraining as HFPreTraining

    torch.manual_seed(0)
    model = HFPreTraining(HFConfig(**TINY)).eval()
    with torch.no_grad():  # make biases and LayerNorms non-trivial so a mix-up shows
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)

    def np_(t: torch.Tensor) -> np.ndarray:
        return t.detach().numpy().astype(np.float32)

    tf: dict[str, np.ndarray] = {}
    emb = model.bert.embeddings
    tf["bert/embeddings/word_embeddings"] = np_(emb.word_embeddings.weight)
    tf["bert/embeddings/position_embeddings"] = np_(emb.position_embeddings.weight)
    tf["bert/embeddings/token_type_embeddings"] = np_(emb.token_type_embeddings.weight)
    tf["bert/embeddings/LayerNorm/gamma"] = np_(emb.LayerNorm.weight)
    tf["bert/embeddings/LayerNorm/beta"] = np_(emb.LayerNorm.bias)

    def dense(prefix: str, lin: torch.nn.Linear) -> None:
        tf[f"{prefix}/kernel"] = np_(lin.weight).T.copy()  # TF kernels are [in, out]
        tf[f"{prefix}/bias"] = np_(lin.bias)

    def norm(prefix: str, ln: torch.nn.LayerNorm) -> None:
        tf[f"{prefix}/gamma"] = np_(ln.weight)
        tf[f"{prefix}/beta"] = np_(ln.bias)

    for i, layer in enumerate(model.bert.encoder.layer):
        p = f"bert/encoder/layer_{i}"
        att = layer.attention
        dense(f"{p}/attention/self/query", att.self.query)
        dense(f"{p}/attention/self/key", att.self.key)
        dense(f"{p}/attention/self/value", att.self.value)
        dense(f"{p}/attention/output/dense", att.output.dense)
        norm(f"{p}/attention/output/LayerNorm", att.output.LayerNorm)
        dense(f"{p}/intermediate/dense", layer.intermediate.dense)
        dense(f"{p}/output/dense", layer.output.dense)
        norm(f"{p}/output/LayerNorm", layer.output.LayerNorm)
    dense("bert/pooler/dense", model.bert.pooler.dense)
    dense("cls/predictions/transform/dense", model.cls.predictions.transform.dense)
    norm("cls/predictions/transform/LayerNorm", model.cls.predictions.transform.LayerNorm)
    tf["cls/predictions/output_bias"] = np_(model.cls.predictions.bias)
    tf["cls/seq_relationship/output_weights"] = np_(model.cls.seq_relationship.weight)
    tf["cls/seq_relationship/output_bias"] = np_(model.cls.seq_relationship.bias)
    # Optimizer state and the step counter, as a pre-training run leaves them: must be skipped.
    rng = np.random.default_rng(0)
    for name in list(tf)[:6]:
        tf[f"{name}/adam_m"] = rng.standard_normal(tf[name].shape).astype(np.float32)
        tf[f"{name}/adam_v"] = rng.standard_normal(tf[name].shape).astype(np.float32)
    tf["global_step"] = np.array(1000, dtype=np.int64)
    return model, tf


@pytest.fixture(scope="module")
def tf_ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts") / "uncased_L-2_H-16_A-2"
    root.mkdir()
    model, tensors = _hf_reference()
    write_tf_checkpoint(root / "bert_model.ckpt", tensors)
    (root / "bert_config.json").write_text(json.dumps(TINY))
    (root / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
    return root, model, tensors


# -------------------------------------------------------------------- tests


def test_crc32c_known_values():
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert crc32c(b"") == 0
    data = bytes(range(256)) * 3
    assert crc32c(data) == _crc32c_bitwise(data)
    assert mask_crc(0x12345678) == _mask(0x12345678)


def test_snappy_literal_and_copies():
    # "abcabcabcX": literal "abc", copy(len 6, offset 3) with 1-byte offset, literal "X"
    compressed = bytes([10, (3 - 1) << 2]) + b"abc" + bytes([((6 - 4) << 2) | 1, 3]) + bytes([0]) + b"X"
    assert _snappy_decompress(compressed) == b"abcabcabcX"


def test_reader_reads_every_tensor_exactly(tf_ckpt):
    root, _, tensors = tf_ckpt
    reader = TFCheckpointReader(root)  # a directory resolves to its single checkpoint
    assert set(reader.keys()) == set(tensors)
    # several data blocks with prefix-compressed keys were written; all keys come back sorted
    keys = [k for k, _ in read_table(root / "bert_model.ckpt.index")]
    assert keys == sorted(keys) and len(keys) == len(tensors) + 1
    for name, arr in tensors.items():
        got = reader.get_tensor(name, verify=True)
        assert got.dtype == arr.dtype and got.shape == arr.shape, name
        np.testing.assert_array_equal(got, arr)


def test_convert_cli_matches_source_model(tf_ckpt, tmp_path, capsys):
    from transformers import BertForPreTraining as HFPreTraining

    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    root, ref, _ = tf_ckpt
    out = tmp_path / "converted"
    assert cli_main(["convert", "tf", str(root), str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["architecture"] == "BertForPreTraining" and result["lowercase"] is True
    assert result["skipped_unknown"] == []
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 40, (3, 11), generator=gen)
    types = torch.randint(0, 2, (3, 11), generator=gen)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask, token_type_ids=types)
        ours, info = BertForPreTraining.from_pretrained(out, output_loading_info=True)
        assert info.missing_keys == [] and info.unexpected_keys == []
        ours = ours(ids, attention_mask=mask, token_type_ids=types)
        theirs = HFPreTraining.from_pretrained(out).eval()(
            input_ids=ids, attention_mask=mask, token_type_ids=types
        )
        enc = BertModel.from_pretrained(out)(ids, attention_mask=mask, token_type_ids=types)
        want_enc = ref.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
    real = mask.bool()
    for got in (ours, theirs):
        torch.testing.assert_close(
            got.prediction_logits[real], want.prediction_logits[real], atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(
            got.seq_relationship_logits, want.seq_relationship_logits, atol=1e-5, rtol=1e-5
        )
    torch.testing.assert_close(enc.pooler_output, want_enc.pooler_output, atol=1e-5, rtol=1e-5)
    assert Tokenizer.from_pretrained(out).tokenize("W1 w2") == ["w1", "w2"]


def test_encoder_only_checkpoint_and_cased_flag(tmp_path):
    _, tensors = _hf_reference()
    root = tmp_path / "my_model"
    root.mkdir()
    write_tf_checkpoint(root / "model.ckpt-500", {k: v for k, v in tensors.items() if k.startswith("bert/")})
    (root / "bert_config.json").write_text(json.dumps(TINY))
    (root / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
    out = tmp_path / "out"
    assert cli_main(["convert", "tf", str(root / "model.ckpt-500"), str(out), "--cased"]) == 0
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "embeddings.word_embeddings.weight" in keys and not any(k.startswith("cls.") for k in keys)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False


def test_guess_lowercase_from_names(tmp_path):
    assert guess_lowercase(tmp_path / "uncased_L-12_H-768_A-12") is True
    assert guess_lowercase(tmp_path / "cased_L-12_H-768_A-12") is False
    assert guess_lowercase(tmp_path / "multi_cased_L-12_H-768_A-12") is False
    assert guess_lowercase(tmp_path / "checkpoints" / "run1") is None


def test_corrupt_files_give_clear_errors(tf_ckpt, tmp_path):
    root, _, _ = tf_ckpt
    index = (root / "bert_model.ckpt.index").read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    broken = bytearray(index)
    broken[40] ^= 0xFF  # inside the first data block
    (bad / "m.ckpt.index").write_bytes(bytes(broken))
    with pytest.raises(UserError, match="CRC32C"):
        TFCheckpointReader(bad / "m.ckpt")
    (bad / "m.ckpt.index").write_bytes(index[:-8] + b"\0" * 8)
    with pytest.raises(UserError, match="magic"):
        TFCheckpointReader(bad / "m.ckpt")
    with pytest.raises(UserError, match="no TensorFlow checkpoint"):
        TFCheckpointReader(tmp_path / "nowhere")
    # the data file is missing
    (bad / "m.ckpt.index").write_bytes(index)
    reader = TFCheckpointReader(bad / "m.ckpt")
    with pytest.raises(UserError, match="data file missing"):
        reader.get_tensor("bert/pooler/dense/bias")
