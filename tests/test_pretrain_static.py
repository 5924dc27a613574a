"""Pre-training on the original's fixed instances: a `prepare --static` dir and TFRecord files (read without
TensorFlow). The first step's loss equals the original run_pretraining.py formula computed by hand on the
same instances; TFRecords written here by an independent tiny writer (protobuf + CRC32C) train identically."""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.data.static import StaticPretrainingDataset
from bertkit.data.tfrecord import TFRecordFile, parse_example
from bertkit.errors import UserError

# ----------------------------------------------------------------------------- an independent TFRecord writer


def _crc32c_bitwise(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = _crc32c_bitwise(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negative int64: two's complement, ten bytes
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _feature(values, packed: bool = True) -> bytes:
    if values and isinstance(values[0], float):
        return _ld(2, _ld(1, struct.pack(f"<{len(values)}f", *values)))  # float_list, packed
    if packed:
        return _ld(3, _ld(1, b"".join(_varint(int(v)) for v in values)))  # int64_list, packed
    return _ld(3, b"".join(_varint(1 << 3 | 0) + _varint(int(v)) for v in values))  # unpacked


def _example(features: dict, packed: bool = True) -> bytes:
    entries = b"".join(_ld(1, _ld(1, k.encode()) + _ld(2, _feature(v, packed))) for k, v in features.items())
    return _ld(1, entries)


def _write_tfrecord(path, payloads) -> None:
    with open(path, "wb") as f:
        for data in payloads:
            header = struct.pack("<Q", len(data))
            f.write(header + struct.pack("<I", _masked(header)) + data + struct.pack("<I", _masked(data)))


def _instances_to_tfrecord(arrays: dict, path, packed: bool = True) -> None:
    rows = []
    for i in range(len(arrays["input_ids"])):
        feats = {k: arrays[k][i].reshape(-1).tolist() for k in arrays}
        feats["masked_lm_weights"] = [float(x) for x in feats["masked_lm_weights"]]
        rows.append(_example(feats, packed))
    _write_tfrecord(path, rows)


# ----------------------------------------------------------------------------------------------- the reader


def test_crc32c_and_example_round_trip(tmp_path):
    from bertkit.tf_checkpoint import crc32c

    assert crc32c(b"123456789") == _crc32c_bitwise(b"123456789") == 0xE3069283  # the standard check value
    feats = {"input_ids": [101, 7, 0, 102], "neg": [-1, -(2**40)], "masked_lm_weights": [1.0, 0.5, 0.0]}
    _write_tfrecord(tmp_path / "a.tfrecord", [_example(feats), _example(feats, packed=False)])
    f = TFRecordFile(tmp_path / "a.tfrecord")
    assert len(f) == 2
    for i in range(2):
        assert f.example(i) == feats
    assert parse_example(b"") == {}


def test_corrupt_and_truncated_files_name_the_record(tmp_path):
    _write_tfrecord(tmp_path / "a.tfrecord", [_example({"x": [1, 2, 3]})] * 3)
    raw = bytearray((tmp_path / "a.tfrecord").read_bytes())
    n = len(raw) // 3
    bad = raw.copy()
    bad[n + 14] ^= 0xFF  # a data byte of record 1
    (tmp_path / "bad.tfrecord").write_bytes(bytes(bad))
    with pytest.raises(UserError, match=rf"bad.tfrecord: record 1 at byte {n}: data CRC mismatch"):
        TFRecordFile(tmp_path / "bad.tfrecord")
    (tmp_path / "cut.tfrecord").write_bytes(bytes(raw[:-5]))
    with pytest.raises(UserError, match=r"record 2 .*truncated record"):
        TFRecordFile(tmp_path / "cut.tfrecord")
    (tmp_path / "text.tfrecord").write_bytes(b"hello, this is not a TFRecord file at all")
    with pytest.raises(UserError, match="length CRC mismatch"):
        TFRecordFile(tmp_path / "text.tfrecord")
    assert len(TFRecordFile(tmp_path / "bad.tfrecord", verify=False)) == 3  # unchecked, it still indexes


# ------------------------------------------------------------------------------------------ pre-training runs

TINY = "[model]\nhidden_size = 32\nnum_hidden_layers = 1\nnum_attention_heads = 2\nintermediate_size = 64\n" \
    "max_position_embeddings = 64\nhidden_dropout_prob = 0.0\nattention_probs_dropout_prob = 0.0\n"  # fmt: skip


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory):
    from bertkit.data.instances import create_static_from_shards
    from lab.demo import tiny_data

    root = tmp_path_factory.mktemp("static")
    data = tiny_data(root / "work", max_bytes=40_000, vocab_size=400, max_seq_length=64)
    out = root / "static"
    shutil.copytree(data, out)
    create_static_from_shards(out, out / "static_instances.npz", max_seq_length=64, dupe_factor=1, seed=3)
    (root / "cfg.toml").write_text(TINY)
    return out


def _pretrain(capsys, data, out, cfg, *extra):
    argv = ["pretrain", "--data", data, "--out", out, "--config", cfg, "--steps", 1, "--batch-size", 8,
            "--max-seq-length", 64, "--log-every", 1, "--checkpoint-every", 0, "--eval-batches", 0,
            "--seed", 5, "--quiet", "--lr", 1e-3, *extra]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    res = json.loads(capsys.readouterr().out)
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    return res, first


def _original_loss(model, arrays: dict, idx) -> float:
    """run_pretraining.py's loss on full-length (max_seq_length) inputs: the masked-LM loss over gathered
    positions weighted by masked_lm_weights, sum(w * nll) / (sum(w) + 1e-5), plus the NSP cross-entropy."""
    t = {
        k: torch.from_numpy(np.asarray(v[idx])).long() for k, v in arrays.items() if k != "masked_lm_weights"
    }
    w = torch.from_numpy(arrays["masked_lm_weights"][idx]).float()
    with torch.no_grad():
        seq = model.bert(t["input_ids"], attention_mask=t["input_mask"], token_type_ids=t["segment_ids"])
        hidden = seq.last_hidden_state  # [B, T, H]
        pos = t["masked_lm_positions"]  # [B, P]
        gathered = hidden.gather(1, pos.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))  # [B, P, H]
        logp = model.cls.predictions(gathered).log_softmax(-1)  # [B, P, V]
        nll = -logp.gather(-1, t["masked_lm_ids"].unsqueeze(-1)).squeeze(-1)  # [B, P]
        mlm = (w * nll).sum() / (w.sum() + 1e-5)
        nsp_logits = model.cls.seq_relationship(seq.pooler_output)  # [B, 2]
        nsp = torch.nn.functional.cross_entropy(nsp_logits, t["next_sentence_labels"].reshape(-1))
    return float(mlm + nsp)


def test_static_dir_first_step_loss_equals_the_original_formula_by_hand(tmp_path, capsys, static_dir):
    from bertkit.config import BertConfig
    from bertkit.data.instances import load_static_instances
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.train.batches import Batches

    res, first = _pretrain(capsys, static_dir, tmp_path / "run", static_dir.parent / "cfg.toml")
    assert res["data_format"] == "static"
    card = (tmp_path / "run" / "model" / "README.md").read_text()  # the model card
    assert "pipeline_tag: fill-mask" in card and "| stream | static |" in card and "| steps | 1 |" in card
    assert f"| loss | {first['loss']:.4g} |" in card and "## Results (training, last log window)" in card
    arrays = load_static_instances(static_dir / "static_instances.npz")
    n = len(arrays["input_ids"])
    # the first batch: the same Batches order the run uses (seed 5), over the fixed instances
    idx = Batches(list(range(n)), 8, seed=5).indices(0)[1]
    torch.manual_seed(5)  # the run initialises the model from its seed
    model = BertForPreTraining(BertConfig.from_json_file(tmp_path / "run" / "model" / "config.json")).eval()
    assert first["loss"] == pytest.approx(_original_loss(model, arrays, idx), rel=2e-5)


def test_tfrecord_files_train_exactly_as_the_static_dir(tmp_path, capsys, static_dir):
    from bertkit.data.instances import load_static_instances

    arrays = load_static_instances(static_dir / "static_instances.npz")
    half = len(arrays["input_ids"]) // 2
    tf = tmp_path / "tf"
    tf.mkdir()
    _instances_to_tfrecord({k: v[:half] for k, v in arrays.items()}, tf / "part-0.tfrecord")
    _instances_to_tfrecord({k: v[half:] for k, v in arrays.items()}, tf / "part-1.tfrecord", packed=False)
    ds = StaticPretrainingDataset.from_tfrecords(tf)
    ref = StaticPretrainingDataset.from_npz(static_dir / "static_instances.npz")
    assert len(ds) == len(ref) and ds.max_predictions_per_seq == 20
    for i in (0, half - 1, half, len(ds) - 1):
        a, b = ds[i], ref[i]
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert (ref[0]["labels"] != -100).sum() == arrays["masked_lm_weights"][0].sum()

    cfg = static_dir.parent / "cfg.toml"
    _, a = _pretrain(capsys, static_dir, tmp_path / "s", cfg, "--steps", 3)
    res, b = _pretrain(capsys, tf, tmp_path / "t", cfg, "--steps", 3, "--vocab", static_dir / "vocab.txt")
    assert res["data_format"] == "tfrecord"
    la = [json.loads(x)["loss"] for x in (tmp_path / "s" / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert la == lb and len(la) == 3  # the same instances in the same order: bitwise the same run
    assert (tmp_path / "t" / "model" / "vocab.txt").read_text() == (static_dir / "vocab.txt").read_text()


def test_static_stream_user_errors(tmp_path, capsys, static_dir):
    cfg = static_dir.parent / "cfg.toml"
    tf = tmp_path / "one.tfrecord"
    _write_tfrecord(tf, [_example({"input_ids": [1, 2]})])
    base = ["pretrain", "--out", str(tmp_path / "o"), "--config", str(cfg), "--steps", "1", "--quiet",
            "--max-seq-length", "64"]  # fmt: skip
    assert main([*base, "--data", str(tf)]) == 2
    assert "--vocab" in capsys.readouterr().err
    assert main([*base, "--data", str(tf), "--vocab", str(static_dir / "vocab.txt")]) == 2
    assert "lacks" in capsys.readouterr().err  # not a pre-training record
    assert main([*base, "--data", str(static_dir), "--max-seq-length", "32"]) == 2  # the later flag wins
    assert "pass --max-seq-length 64" in capsys.readouterr().err
