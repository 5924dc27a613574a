"""Fine-tuning with FSDP2 under torchrun (two CPU processes, gloo): equal to one process with accumulation 2,
a run killed after a checkpoint resumes to the uninterrupted run, and the saved model is an ordinary one."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from children import child_env
from test_finetune_scale import _base, _losses, _run, tiny  # noqa: F401 - tiny: the fixture

# 12 steps, the weights best on dev at step 6 or 12 kept (gathered from the shards under FSDP)
STEPS = ["--max-steps", 12, "--eval-every", 6, "--keep-best"]
LAUNCH_TIMEOUT_S = 240  # a hung rendezvous or collective fails the test instead of waiting for pytest's limit

# `bertkit` with SIGKILL at a step: every rank dies right after logging it (its newest checkpoint is older)
KILLER = textwrap.dedent(
    """
    import os, signal, sys
    import bertkit.tasks.finetune as F
    from bertkit.cli import run
    kill_at, finetune = int(sys.argv[1]), F.finetune
    def killer(rec):
        if rec["step"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    F.finetune = lambda *a, **k: finetune(*a, callbacks=[killer], **k)
    run(sys.argv[2:])
    """
)


def two_processes(argv: list, script: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--max_restarts", "0", *(script or ["-m", "bertkit"]), *map(str, argv)]  # fmt: skip
    return subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)


def fsdp_argv(tiny: Path, out: Path) -> list:  # noqa: F811 - tiny: the fixture's value
    return [*_base(tiny), "--out", out, "--distributed", "fsdp", *STEPS, "--checkpoint-every", 4]


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory, tiny) -> Path:  # noqa: F811
    """Two processes, FSDP, 12 steps with a checkpoint every 4: the run the other runs must equal."""
    out = tmp_path_factory.mktemp("fsdp") / "two"
    p = two_processes(fsdp_argv(tiny, out))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_fsdp_two_processes_equal_one_with_accumulation_2_and_save_an_ordinary_model(
    tmp_path,
    capsys,
    caplog,
    tiny,  # noqa: F811
    fsdp_run,
):
    from safetensors.torch import load_file

    from bertkit.heads.finetune import BertForSequenceClassification
    from bertkit.train.checkpoint import load_checkpoint

    # one process: --distributed fsdp has nothing to shard, says so in one line and trains unwrapped
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        one = _run(capsys, [*_base(tiny), "--out", tmp_path / "one", "--grad-accum", 2, *STEPS,
                            "--distributed", "fsdp"])  # fmt: skip
    assert [r.getMessage() for r in caplog.records if "--distributed" in r.getMessage()] == [
        "--distributed fsdp: one process, nothing to shard; it trains unwrapped"
    ]
    res = json.loads((fsdp_run / "metrics.json").read_text())
    assert res["world_size"] == 2 and one["world_size"] == 1 and res["device"] == one["device"] == "cpu"
    assert res["hyperparameters"]["distributed"] == "fsdp"
    a, b = _losses(tmp_path / "one"), _losses(fsdp_run)
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 13))
    for (_, x), (_, y) in zip(a, b):
        assert abs(x - y) <= 1e-5
    assert res["metrics"] == pytest.approx(one["metrics"], abs=1e-6)
    assert res["best"] == pytest.approx(one["best"], abs=1e-6)

    # the checkpoint holds the gathered tensors under the plain model's names, not one rank's shards
    ckpt = load_checkpoint(fsdp_run / "checkpoints" / "step-00000012.pt")
    assert ckpt["world_size"] == 2
    # the saved folder loads like any other and predicts as the one-process model does
    models = [
        BertForSequenceClassification.from_pretrained(r / "model").eval()
        for r in (tmp_path / "one", fsdp_run)
    ]
    assert models[1].state_dict().keys() == ckpt["model"].keys()
    # the kept best weights, gathered from the shards, are the saved model's
    best = load_file(fsdp_run / "best" / "model.safetensors")
    assert best.keys() == ckpt["model"].keys()
    for k, v in best.items():
        assert torch.equal(v, models[1].state_dict()[k]), k
    ids = torch.randint(5, models[0].config.vocab_size, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = [m(input_ids=ids).logits for m in models]
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-5)


def test_fsdp_resume_after_sigkill_equals_the_uninterrupted_run(tmp_path, tiny, fsdp_run):  # noqa: F811
    cut = tmp_path / "cut"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    killed = two_processes(fsdp_argv(tiny, cut), script=[str(script), "10"])
    assert killed.returncode != 0
    assert killed.stderr.count(f"exitcode  : {-signal.SIGKILL} ") == 2, killed.stderr[-3000:]  # both ranks
    assert _losses(cut)[-1][0] == 10
    assert sorted(x.name for x in (cut / "checkpoints").iterdir()) == ["step-00000004.pt", "step-00000008.pt"]

    resumed = two_processes([*fsdp_argv(tiny, cut), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _losses(cut) == _losses(fsdp_run)  # bitwise: floats compared exactly
    assert (cut / "model" / "model.safetensors").read_bytes() == (
        fsdp_run / "model" / "model.safetensors"
    ).read_bytes()
    done = json.loads((cut / "metrics.json").read_text())
    assert done["metrics"] == json.loads((fsdp_run / "metrics.json").read_text())["metrics"]


def test_an_unknown_strategy_is_refused(tmp_path, capsys, tiny):  # noqa: F811
    from bertkit.cli import main

    with pytest.raises(SystemExit) as e:
        main([*map(str, _base(tiny)), "--out", str(tmp_path / "x"), "--distributed", "zero"])
    assert e.value.code == 2 and "--distributed: invalid choice: 'zero'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
