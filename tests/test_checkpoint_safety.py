"""Training checkpoints never run code from the file: a planted pickle in OUT/checkpoints is refused (and its
payload never runs) on `pretrain --resume` and `finetune --resume`; our own checkpoints round-trip through
``weights_only`` loading with every RNG restored; stale temp files of a killed write are cleaned; atomic
writes respect the umask."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from badinput import assert_refused, bertkit

from bertkit.errors import UserError
from bertkit.io import atomic_dir, atomic_write
from bertkit.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


class _Planted:
    """Unpickling this creates the marker file: the proof that code from the file ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(run: Path, marker: Path, step: int = 99, zip_format: bool = True) -> Path:
    path = run / "checkpoints" / f"step-{step:08d}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"step": step, "model": {}, "optimizer": {}, "rng": [], "evil": _Planted(marker)}
    if zip_format:
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))
    return path


@pytest.mark.parametrize("zip_format", [True, False])
def test_planted_pickle_is_refused_and_never_runs(tmp_path, zip_format):
    marker = tmp_path / "pwned"
    path = _plant(tmp_path / "run", marker, zip_format=zip_format)
    with pytest.raises(UserError, match=r"step-00000099\.pt: not a readable bertkit training checkpoint"):
        latest_checkpoint(tmp_path / "run")
    assert not marker.exists()
    with pytest.raises(UserError, match="step-00000099"):
        load_checkpoint(path)
    assert not marker.exists()


def test_damaged_or_incomplete_checkpoints_are_refused(tmp_path):
    good = save_checkpoint(
        tmp_path, 1, {"step": 1, "model": {"w": torch.ones(3)}, "optimizer": {}, "rng": []}
    )
    data = good.read_bytes()
    bad = good.with_name("step-00000002.pt")
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match=r"step-00000002\.pt: not a readable"):
        latest_checkpoint(tmp_path)
    bad.unlink()
    torch.save({"step": 3, "model": {}}, good.with_name("step-00000003.pt"))
    with pytest.raises(UserError, match=r"step-00000003\.pt: not a complete .* \(missing optimizer, rng\)"):
        latest_checkpoint(tmp_path)


def test_rng_states_round_trip_through_weights_only_loading(tmp_path):
    random.seed(1)
    np.random.seed(2)
    np.random.standard_normal()  # leaves a cached gaussian in numpy's state
    torch.manual_seed(3)
    state = {"step": 5, "model": {}, "optimizer": {}, "rng": [rng_state()], "data": {"n": np.int64(7)}}
    save_checkpoint(tmp_path, 5, state)
    expected = (random.random(), np.random.standard_normal(), np.random.rand(), torch.rand(2))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    path, loaded = latest_checkpoint(tmp_path)
    assert path.name == "step-00000005.pt" and loaded["data"]["n"] == 7 and type(loaded["data"]["n"]) is int
    torch.load(path, weights_only=True)  # the file itself needs no unpickling code
    set_rng_state(loaded["rng"][0])
    got = (random.random(), np.random.standard_normal(), np.random.rand(), torch.rand(2))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])


def test_stale_temp_of_a_killed_write_is_removed_on_the_next_save(tmp_path):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    stale = ckpts / ".step-00000004.pt.k3j2h1.tmp"  # what atomic_write leaves when SIGKILLed mid-write
    stale.write_bytes(b"half")
    save_checkpoint(tmp_path, 8, {"step": 8, "model": {}, "optimizer": {}, "rng": []})
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-00000008.pt"]


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_atomic_writes_respect_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        with atomic_write(tmp_path / "f.txt") as f:
            f.write("x")
        with atomic_dir(tmp_path / "d") as d:
            (d / "inner").write_text("y")
        plain = tmp_path / "plain"
        plain.write_text("z")  # what open() gives: the reference
        plain_dir = tmp_path / "plain_dir"
        plain_dir.mkdir()
    finally:
        os.umask(old)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "d").stat().st_mode & 0o777 == plain_dir.stat().st_mode & 0o777 == 0o777 & ~mask


# ---------------------------------------------------------------------------------- through real processes


def test_pretrain_resume_refuses_a_planted_checkpoint(tmp_path, tiny_data):
    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    planted = _plant(run, marker)
    p = bertkit(["pretrain", "--data", tiny_data, "--out", run, "--preset", "tiny", "--steps", 2,
                 "--batch-size", 2, "--max-seq-length", 64, "--quiet", "--resume"])  # fmt: skip
    assert_refused(p, str(planted), "not a readable bertkit training checkpoint")
    assert not marker.exists()
    assert not (run / "model").exists() and not (run / "results.json").exists()
    assert [x.name for x in (run / "checkpoints").iterdir()] == [planted.name]


def test_finetune_resume_refuses_a_planted_checkpoint(tmp_path, tiny_model):
    marker = tmp_path / "pwned"
    rows = "text,label\n" + "good fine,1\nbad poor,0\n" * 4
    (tmp_path / "train.csv").write_text(rows)
    run = tmp_path / "ft"
    planted = _plant(run, marker)
    p = bertkit(["finetune", "classify", "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv",
                 "--model", tiny_model, "--out", run, "--epochs", 1, "--batch-size", 4, "--quiet",
                 "--checkpoint-every", 1, "--resume"])  # fmt: skip
    assert_refused(p, str(planted), "not a readable bertkit training checkpoint")
    assert not marker.exists()


def test_atomic_write_to_a_device_writes_into_it_and_leaves_it_a_device(tmp_path):
    """``--out /dev/null`` (any non-regular file) was replaced by a regular file through the temp+rename.
    A null device made here (root only) stands in for /dev/null."""
    import stat

    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    with atomic_write(node) as f:
        f.write("discarded\n")
    with atomic_write(node, "wb") as f:
        f.write(b"\x00" * 10)
    assert stat.S_ISCHR(node.stat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_failed_command_leaves_an_output_device_alone(tmp_path):
    import stat

    from bertkit.cli.args import claim_output

    node = tmp_path / "null.npy"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    with pytest.raises(UserError, match="failed late"):
        with claim_output(node, kind="file") as out:
            with atomic_write(out, "wb") as f:
                f.write(b"x")
            raise UserError("failed late")
    assert stat.S_ISCHR(node.stat().st_mode)
