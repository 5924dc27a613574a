"""Pre-training past one process on CPU (gloo): FSDP2 with two processes equals one process with the same
global batch, resumes after SIGKILL to the uninterrupted run's losses and saves an ordinary model folder; two
``torchrun`` launchers joined by c10d rendezvous on 127.0.0.1 (two "nodes") equal one process, and a rank
ends without interpreter teardown (which gloo's threads could abort)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from children import child_env
from test_pretrain_run import KILLER, STOPPER, TINY_MODEL, inproc, losses

NO_DROPOUT = "[model]\nhidden_dropout_prob = 0.0\nattention_probs_dropout_prob = 0.0"
# a dozen optimizer steps of 8 sequences of 64 tokens; two processes take 4 each, one process 2 x 4. On CPU
# with gloo where a GPU is too (CPU_ONLY hides it from the children, whose backend would be NCCL otherwise).
COMMON = ["--device", "cpu", "--steps", 12, "--batch-size", 8, "--max-seq-length", 64, "--lr", 1e-3,
          "--log-every", 1, "--quiet", "--valid-documents", 2]  # fmt: skip
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}
LAUNCH_TIMEOUT_S = 240  # a hung rendezvous or collective fails the test instead of waiting for pytest's limit


def config(path: Path, dropout: bool) -> Path:
    path.write_text(TINY_MODEL if dropout else TINY_MODEL.replace("[model]", NO_DROPOUT))
    return path


def torchrun(launcher: list[str], script: list[str], argv: list) -> list[str]:
    """``python -m torch.distributed.run LAUNCHER SCRIPT pretrain ARGV`` (``-m bertkit`` or a script path)."""
    return [sys.executable, "-m", "torch.distributed.run", *launcher, *script, "pretrain", *map(str, argv)]


def two_processes(argv: list, script: list[str] | None = None) -> subprocess.CompletedProcess:
    launcher = ["--standalone", "--nproc_per_node", "2", "--max_restarts", "0"]
    cmd = torchrun(launcher, script or ["-m", "bertkit"], argv)
    return subprocess.run(
        cmd, env=child_env(**CPU_ONLY), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )


def free_port() -> int:
    """A port nobody listens on now (the kernel's choice for port 0; released for torchrun to bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_matches(one: Path, other: Path) -> None:
    """``other``'s training losses (every step) and held-out losses (steps 6 and 12) equal ``one``'s to rounding."""
    a, b = losses(one), losses(other)
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 13))
    for (_, x), (_, y) in zip(a, b):
        assert y == pytest.approx(x, rel=1e-5, abs=1e-6)
    evals = [
        [json.loads(x)["loss"] for x in (r / "eval.jsonl").read_text().splitlines()] for r in (one, other)
    ]
    assert len(evals[1]) == 2 and evals[1] == pytest.approx(evals[0], rel=1e-5)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tiny_data) -> dict:
    """One process, grad_accum 2, no dropout: the reference the multi-process runs must equal."""
    tmp = tmp_path_factory.mktemp("one")
    argv = ["--data", tiny_data, "--config", config(tmp / "cfg.toml", dropout=False), *COMMON]
    inproc(["--out", tmp / "run", "--grad-accum", 2, "--checkpoint-every", 4, "--eval-every", 6,
            "--eval-batches", 1, *argv])  # fmt: skip
    return {"run": tmp / "run", "argv": argv}


def test_fsdp_two_processes_match_one_and_save_an_ordinary_model(tmp_path, one_process):
    from safetensors.torch import load_file

    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.train.checkpoint import load_checkpoint

    out = tmp_path / "fsdp"
    p = two_processes(["--out", out, "--distributed", "fsdp", "--checkpoint-every", 4, "--eval-every", 6,
                       "--eval-batches", 1, *one_process["argv"]])  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["world_size"] == 2 and res["device"] == "cpu" and res["phases"][0]["distributed"] == "fsdp"
    one = one_process["run"]
    assert_matches(one, out)

    # the exported folder loads like any other and holds the one-process run's weights (to rounding)
    model = BertForPreTraining.from_pretrained(out / "model")
    ref = load_file(one / "model" / "model.safetensors")
    got = load_file(out / "model" / "model.safetensors")
    assert got.keys() == ref.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5, msg=k)
    # the last checkpoint holds the full (gathered) tensors under the plain model's names, not one rank's
    # shards: the very weights the loaded folder has
    ckpt = load_checkpoint(out / "checkpoints" / "step-00000012.pt")
    assert ckpt["world_size"] == 2 and len(ckpt["rng"]) == 2
    assert ckpt["model"].keys() == load_checkpoint(one / "checkpoints" / "step-00000012.pt")["model"].keys()
    loaded = model.state_dict()
    for k, v in ckpt["model"].items():
        assert torch.equal(v, loaded[k]), k


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step(tmp_path, tiny_data):
    """torchrun's workers may not all receive a stop signal (or not at the same step): the ranks agree on the
    step to stop after, checkpoint it together (FSDP gathers the shards) and exit 143; --resume goes on."""
    argv = ["--data", tiny_data, "--config", config(tmp_path / "cfg.toml", dropout=False), "--distributed", "fsdp",
            "--checkpoint-every", 4, "--eval-batches", 0, *COMMON]  # fmt: skip
    run = tmp_path / "run"
    script = tmp_path / "stopper.py"
    script.write_text(STOPPER)
    stopped = two_processes(["--out", run, *argv], script=[str(script), "6", "1"])  # SIGTERM to rank 1 only
    assert stopped.returncode != 0
    # a rank that stops a moment after the other may be ended by torchrun's own SIGTERM: no rank crashed
    codes = set(re.findall(r"exitcode\s*:\s*(-?\d+)", stopped.stderr))
    assert str(128 + signal.SIGTERM) in codes <= {str(128 + signal.SIGTERM), str(-signal.SIGTERM)}, (
        stopped.stderr[-3000:]
    )
    assert losses(run)[-1][0] == 6
    assert sorted(x.name for x in (run / "checkpoints").iterdir()) == ["step-00000004.pt", "step-00000006.pt"]
    assert not (run / "model").exists()
    resumed = two_processes(["--out", run, *argv, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [s for s, _ in losses(run)] == list(range(1, 13))


def test_fsdp_resume_after_sigkill_equals_the_uninterrupted_run(tmp_path, tiny_data):
    # dropout on: each rank's RNG state must come back from the checkpoint
    argv = ["--data", tiny_data, "--config", config(tmp_path / "cfg.toml", dropout=True), "--distributed", "fsdp",
            "--checkpoint-every", 4, "--eval-batches", 0, *COMMON]  # fmt: skip
    ref = two_processes(["--out", tmp_path / "ref", *argv])
    assert ref.returncode == 0, ref.stderr[-3000:]

    cut = tmp_path / "cut"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    killed = two_processes(["--out", cut, *argv], script=[str(script), "10"])  # every rank dies at step 10
    assert killed.returncode != 0
    assert killed.stderr.count(f"exitcode  : {-signal.SIGKILL} ") == 2, killed.stderr[-3000:]  # both ranks
    assert losses(cut)[-1][0] == 10
    assert sorted(x.name for x in (cut / "checkpoints").iterdir()) == ["step-00000004.pt", "step-00000008.pt"]

    resumed = two_processes(["--out", cut, *argv, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(cut) == losses(tmp_path / "ref")  # bitwise: floats compared exactly
    assert (cut / "model" / "model.safetensors").read_bytes() == (
        tmp_path / "ref" / "model" / "model.safetensors"
    ).read_bytes()


def test_two_nodes_by_c10d_rendezvous_match_one_process(tmp_path, one_process):
    out = tmp_path / "two-nodes"
    argv = [
        "--out",
        out,
        "--checkpoint-every",
        4,
        "--eval-every",
        6,
        "--eval-batches",
        1,
        *one_process["argv"],
    ]
    # two launchers of one process each, numbered by the rendezvous as they join (--node_rank is static's)
    launcher = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                f"127.0.0.1:{free_port()}", "--rdzv_id", "bertkit-test", "--rdzv_conf", "join_timeout=120",
                "--max_restarts", "0"]  # fmt: skip
    cmd = torchrun(launcher, ["-m", "bertkit"], argv)
    # each launcher leads its own process group, so a timeout can end it with the worker it started
    nodes = [
        subprocess.Popen(cmd, env=child_env(**CPU_ONLY), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
        for _ in range(2)
    ]  # fmt: skip
    try:
        errors = [node.communicate(timeout=LAUNCH_TIMEOUT_S)[1] for node in nodes]
    finally:
        for node in nodes:  # a launcher left waiting for its peer must not outlive the test
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    for node, err in zip(nodes, errors):
        assert node.returncode == 0, err[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["world_size"] == 2 and res["phases"][0]["distributed"] == "ddp"
    assert_matches(one_process["run"], out)


def test_a_command_destroys_the_process_group_it_ran_under(tmp_path, tiny_model):
    """Left to the interpreter's exit, gloo's teardown could abort a rank after its work was done."""
    import torch.distributed as dist

    from bertkit.cli import main

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert main(["info", str(tiny_model)]) == 0
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# a command run under a process group, by bertkit's entry point: `atexit` handlers run and the output is
# flushed, but the interpreter is not torn down (a module global's __del__ would run in that teardown)
UNDER_A_GROUP = """
import atexit, sys
import torch.distributed as dist
from bertkit.cli import run

class Teardown:
    def __del__(self):
        print("torn down", flush=True)

teardown = Teardown()
atexit.register(lambda: print("exit handlers ran"))
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
run(sys.argv[1:])
"""


@pytest.mark.parametrize("ok", [True, False])
def test_a_rank_ends_without_interpreter_teardown(tmp_path, tiny_model, ok):
    """Gloo's worker threads outlive destroy_process_group; one that drops a finished collective's tensors
    while the interpreter is torn down is ended by Python with pthread_exit, and that aborts the rank."""
    script = tmp_path / "rank.py"
    script.write_text(UNDER_A_GROUP)
    model = tiny_model if ok else tmp_path / "missing"
    p = subprocess.run([sys.executable, script, "info", str(model)], env=child_env(**CPU_ONLY),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == (0 if ok else 2), p.stderr[-3000:]
    assert "exit handlers ran" in p.stdout and "torn down" not in p.stdout
    if ok:
        assert json.loads(p.stdout[: p.stdout.rindex("}") + 1])["model_type"] == "bert"
    else:
        assert "bertkit info: error:" in p.stderr
