"""Real pre-training runs on a small prepared corpus (the stdlib docstrings): loss falls, files and HF export,
kill -9 and resume gives bitwise the same losses, 2-process DDP equals one process, two-phase configs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from children import child_env

ROOT = Path(__file__).resolve().parents[1]

TINY_MODEL = textwrap.dedent(
    """
    [model]
    hidden_size = 64
    num_hidden_layers = 2
    num_attention_heads = 2
    intermediate_size = 128
    max_position_embeddings = 64
    """
)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    from lab.demo import tiny_data

    return tiny_data(tmp_path_factory.getbasetemp() / "pretrain_tiny_data", max_seq_length=64)


def env1() -> dict:
    return child_env()


def cli(args, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bertkit", "pretrain", *map(str, args)]
    return subprocess.run(cmd, env=env1(), capture_output=True, text=True, timeout=300, **kw)


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def inproc(args, resume=False) -> dict:
    """The same command in this process (threads are 1 here too: tests/conftest.py)."""
    from bertkit.cli import build_parser
    from bertkit.cli.pretrain import config_from_args
    from bertkit.pretrain import pretrain

    return pretrain(config_from_args(build_parser().parse_args(["pretrain", *map(str, args)])), resume=resume)


def write_config(path: Path, extra: str = "") -> Path:
    path.write_text(TINY_MODEL.replace("[model]", extra + "\n[model]"))
    return path


def test_short_run_learns_and_exports_for_transformers(tmp_path, data_dir):
    from bertkit.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(
        data=str(data_dir), out=str(tmp_path / "run"), preset="tiny",
        model_overrides=dict(hidden_size=64, num_attention_heads=2, intermediate_size=128, max_position_embeddings=64),
        steps=40, batch_size=16, max_seq_length=64, lr=2e-3, warmup=0.1, log_every=5, checkpoint_every=20,
        eval_every=20, eval_batches=2, progress=False, valid_documents=2, num_threads=1,
    )  # fmt: skip
    res = pretrain(cfg)
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for key in ("step", "loss", "masked_lm_accuracy", "next_sentence_accuracy", "lr", "tokens_per_s"):
        assert key in rows[0], key
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5  # from ~ln(1000)+ln(2) down
    assert rows[-1]["masked_lm_accuracy"] > rows[0]["masked_lm_accuracy"]
    assert (run / "curves.png").stat().st_size > 1000
    assert res["eval"]["step"] == 40 and 0 <= res["eval"]["masked_lm_accuracy"] <= 1
    assert json.loads((run / "results.json").read_text())["model_dir"] == str(run / "model")

    transformers = pytest.importorskip("transformers")
    from bertkit.heads.pretraining import BertForPreTraining

    model_dir = run / "model"
    assert (model_dir / "vocab.txt").is_file()
    ours = BertForPreTraining.from_pretrained(model_dir)
    theirs = transformers.BertForPreTraining.from_pretrained(model_dir).eval()
    tok = transformers.BertTokenizer.from_pretrained(model_dir)
    enc = tok(["return a new list of the items.", "raise an error if the file is missing."], padding=True,
              return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        a = ours(**enc)
        b = theirs(**enc)
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(a.prediction_logits[real], b.prediction_logits[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, rtol=1e-4, atol=1e-4)


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from bertkit.cli import build_parser
    from bertkit.cli.pretrain import config_from_args
    from bertkit.pretrain import pretrain
    kill_at = int(sys.argv[1])
    args = build_parser().parse_args(sys.argv[2:])
    def killer(rec):
        if rec["step"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    pretrain(config_from_args(args), resume=args.resume, callbacks=[killer])
    """
)

# `bertkit ARGV...` as a scheduler stops it: SIGTERM to the process (on the ranks named, under torchrun) once
# step STOP_AT is logged
STOPPER = textwrap.dedent(
    """
    import os, signal, sys
    from bertkit.cli import main
    from bertkit.train import loop
    stop_at, ranks = int(sys.argv[1]), sys.argv[2].split(",")
    trainer_init = loop.Trainer.__init__
    def with_stop(self, *args, callbacks=(), **kwargs):
        def stop(rec):
            if rec["step"] == stop_at and os.environ.get("RANK", "0") in ranks:
                os.kill(os.getpid(), signal.SIGTERM)
        trainer_init(self, *args, callbacks=[*callbacks, stop], **kwargs)
    loop.Trainer.__init__ = with_stop
    sys.exit(main(sys.argv[3:]))
    """
)


def test_sigkill_and_resume_gives_bitwise_identical_losses(tmp_path, data_dir):
    cfg = write_config(tmp_path / "cfg.toml")  # dropout stays on: RNG states must be restored
    common = ["--data", data_dir, "--config", cfg, "--steps", 14, "--batch-size", 8, "--max-seq-length", 64,
              "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 4, "--eval-every", 5, "--eval-batches", 1,
              "--quiet", "--valid-documents", 2, "--grad-accum", 2]  # fmt: skip
    inproc(["--out", tmp_path / "ref", *common])  # the uninterrupted reference

    run = tmp_path / "killed"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    argv = ["pretrain", "--out", run, *common]
    p = subprocess.run([sys.executable, script, "10", *map(str, argv)], env=env1(), capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert losses(run)[-1][0] == 10  # it died after logging step 10; the newest checkpoint is step 8
    assert sorted(x.name for x in (run / "checkpoints").iterdir()) == ["step-00000004.pt", "step-00000008.pt"]
    assert not (run / "model").exists()

    resumed = cli(["--out", run, *common, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(run) == losses(tmp_path / "ref")  # bitwise: floats compared exactly
    assert [json.loads(x)["loss"] for x in (run / "eval.jsonl").read_text().splitlines()] == [
        json.loads(x)["loss"] for x in (tmp_path / "ref" / "eval.jsonl").read_text().splitlines()
    ]
    from safetensors.torch import load_file

    a = load_file(run / "model" / "model.safetensors")
    b = load_file(tmp_path / "ref" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_checkpoints_the_step_it_finished_and_resume_is_bitwise(tmp_path, data_dir):
    """`bertkit pretrain` sent SIGTERM after step 6 (periodic checkpoints every 4): it finishes the step, writes
    its checkpoint, says so in one line and exits 143 without a model; --resume equals the unstopped run."""
    cfg = write_config(tmp_path / "cfg.toml")  # dropout on: RNG states must be restored
    common = ["--data", data_dir, "--config", cfg, "--steps", 10, "--batch-size", 8, "--max-seq-length", 64,
              "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 4, "--eval-every", 5, "--eval-batches", 1,
              "--quiet", "--valid-documents", 2, "--grad-accum", 2]  # fmt: skip
    inproc(["--out", tmp_path / "ref", *common])

    run = tmp_path / "stopped"
    script = tmp_path / "stopper.py"
    script.write_text(STOPPER)
    p = subprocess.run([sys.executable, script, "6", "0", "pretrain", "--out", str(run), *map(str, common)],
                       env=env1(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 128 + signal.SIGTERM, p.stderr[-3000:]
    checkpoint = run / "checkpoints" / "step-00000006.pt"
    assert (
        f"bertkit pretrain: stopped by SIGTERM after step 6; its checkpoint is {checkpoint}; run the same command "
        "with --resume to continue" in p.stderr
    )
    assert sorted(x.name for x in (run / "checkpoints").iterdir()) == ["step-00000004.pt", checkpoint.name]
    assert losses(run)[-1][0] == 6
    assert not (run / "model").exists() and not (run / "results.json").exists()  # a stopped run is no result

    resumed = cli(["--out", run, *common, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(run) == losses(tmp_path / "ref")  # bitwise
    assert (run / "model" / "model.safetensors").read_bytes() == (
        tmp_path / "ref" / "model" / "model.safetensors"
    ).read_bytes()


def test_two_process_ddp_matches_one_process(tmp_path, data_dir):
    cfg = write_config(tmp_path / "cfg.toml", extra="")
    text = cfg.read_text().replace(
        "[model]", "[model]\nhidden_dropout_prob = 0.0\nattention_probs_dropout_prob = 0.0"
    )
    cfg.write_text(text)
    common = ["--data", data_dir, "--config", cfg, "--steps", 6, "--batch-size", 8, "--max-seq-length", 64,
              "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 0, "--eval-batches", 0, "--quiet"]  # fmt: skip
    inproc(["--out", tmp_path / "one", "--grad-accum", 2, *common])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "bertkit", "pretrain", "--out", str(tmp_path / "two"), *map(str, common)]  # fmt: skip
    two = subprocess.run(cmd, env=env1(), capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    res = json.loads((tmp_path / "two" / "results.json").read_text())
    assert res["world_size"] == 2 and res["device"] == "cpu"
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 7))
    for (_, x), (_, y) in zip(a, b):
        assert y == pytest.approx(x, rel=1e-5, abs=1e-6)
    # a single process with the whole global batch in one micro-batch: same examples, and losses close
    # (they differ only in how the masked-token mean is split)
    inproc(["--out", tmp_path / "full", *common])
    for (_, x), (_, y) in zip(losses(tmp_path / "full"), b):
        assert y == pytest.approx(x, rel=2e-2)


def test_two_phase_config_and_ablation_objectives(tmp_path, data_dir):
    from bertkit.pretrain import PretrainConfig, pretrain

    cfg_file = tmp_path / "two_phase.toml"
    cfg_file.write_text(
        textwrap.dedent(
            """
            objective = "mlm"
            lr = 1e-3
            warmup = 2
            log_every = 1
            checkpoint_every = 3
            progress = false
            eval_batches = 0
            num_threads = 1
            gradient_checkpointing = true
            [model]
            hidden_size = 32
            num_hidden_layers = 1
            num_attention_heads = 2
            intermediate_size = 64
            max_position_embeddings = 64
            [[phases]]
            steps = 4
            max_seq_length = 32
            batch_size = 8
            [[phases]]
            steps = 2
            max_seq_length = 64
            batch_size = 4
            max_predictions_per_seq = 10
            """
        )
    )
    cfg = PretrainConfig.from_file(cfg_file, data=str(data_dir), out=str(tmp_path / "run"))
    assert cfg.gradient_checkpointing is True  # the long phase recomputes layers in backward
    res = pretrain(cfg)
    assert [p["max_seq_length"] for p in res["phases"]] == [32, 64]
    steps = [
        r["step"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    ]
    assert steps == [1, 2, 3, 4, 5, 6]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "next_sentence_accuracy" not in rows[0]  # the No-NSP ablation
    # one schedule over both phases: warm-up from 0 to the peak at step `warmup`, then linear decay to the end
    assert rows[0]["lr"] == 0.0 and rows[2]["lr"] == pytest.approx(1e-3) and rows[-1]["lr"] < rows[3]["lr"]
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    # resuming a finished multi-phase run does no more steps
    again = pretrain(cfg, resume=True)
    assert again["phases"] == []
    # LTR objective runs (causal encoder, next-token labels)
    ltr = PretrainConfig.from_file(cfg_file, data=str(data_dir), out=str(tmp_path / "ltr"), objective="ltr")
    ltr.phases = ltr.phases[:1]
    res = pretrain(ltr)
    assert res["last"]["masked_lm_accuracy"] >= 0
    with pytest.raises(Exception, match="objective"):
        pretrain(
            PretrainConfig.from_file(cfg_file, data=str(data_dir), out=str(tmp_path / "x"), objective="nsp")
        )


class _Stop(Exception):
    pass


def test_resume_computes_with_the_gemm_backend_its_checkpoint_was_written_with(
    tmp_path, data_dir, monkeypatch
):
    """A run written on one fp32 GEMM backend and resumed in a process whose per-machine choice fell the other
    way (they round differently) continues on the checkpoint's backend: bitwise the uninterrupted run."""
    from bertkit.cli import build_parser
    from bertkit.cli.pretrain import config_from_args
    from bertkit.kernels import gemm
    from bertkit.pretrain import pretrain

    if gemm.onednn_op() is None:
        pytest.skip("this torch build has no oneDNN linear: one backend only")
    monkeypatch.delenv("BERTKIT_ONEDNN", raising=False)
    cfg = write_config(tmp_path / "cfg.toml")
    common = ["--data", data_dir, "--config", cfg, "--steps", 14, "--batch-size", 8, "--max-seq-length", 64,
              "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 4, "--quiet", "--valid-documents", 2,
              "--grad-accum", 2]  # fmt: skip

    def run(out, resume=False, stop_at=None):
        def stop(rec):
            if rec["step"] == stop_at:
                raise _Stop

        args = build_parser().parse_args(["pretrain", "--out", str(out), *map(str, common)])
        pretrain(config_from_args(args), resume=resume, callbacks=[stop])

    try:
        gemm.use_backend("torch")
        run(tmp_path / "ref")
        with pytest.raises(_Stop):
            run(tmp_path / "cut", stop_at=6)  # the newest checkpoint is step 4's
        gemm.use_backend("onednn")  # this process's choice, had it been made afresh, fell the other way
        run(tmp_path / "cut", resume=True)
        resumed_on = gemm.backend_name()
    finally:
        gemm.use_backend(None)
    assert losses(tmp_path / "cut") == losses(tmp_path / "ref")  # bitwise: floats compared exactly
    assert resumed_on == "torch"


def test_the_run_config_records_the_gemm_backend_and_a_resume_computes_with_it(
    tmp_path, data_dir, monkeypatch
):
    """A run killed before its first checkpoint and resumed in a process whose choice fell the other way
    computes with the backend its run config recorded."""
    from bertkit.kernels import gemm

    if gemm.onednn_op() is None:
        pytest.skip("this torch build has no oneDNN linear: one backend only")
    monkeypatch.delenv("BERTKIT_ONEDNN", raising=False)
    cfg = write_config(tmp_path / "cfg.toml")
    args = ["--data", data_dir, "--config", cfg, "--steps", 2, "--batch-size", 8, "--max-seq-length", 64,
            "--quiet", "--valid-documents", 2, "--checkpoint-every", 0, "--out", tmp_path / "run"]  # fmt: skip
    try:
        gemm.use_backend("torch")
        inproc(args)
        recorded = json.loads((tmp_path / "run" / "run_config.json").read_text())["choices"]
        gemm.use_backend("onednn")
        inproc(args, resume=True)  # no checkpoint to resume from: the run config is the record
        resumed_on = gemm.backend_name()
    finally:
        gemm.use_backend(None)
    assert recorded == {"linear": "torch", "bf16_attention": None} and resumed_on == "torch"
