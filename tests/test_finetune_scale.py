"""Fine-tuning at scale: gradient accumulation, 2-process DDP (gloo) equal to one process with accumulation 2,
--max-steps, --eval-every with --keep-best, and the fp16 gradient-scaler path of the Trainer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from children import child_env
from torch import nn

from bertkit.cli import main
from bertkit.train import LengthGroupedBatches, Trainer
from bertkit.train.precision import autocast, check_precision, make_scaler

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys, argv):
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run_dir / "metrics.jsonl").open())]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir) -> Path:
    """A tiny random BERT without dropout (DDP equality needs the same forward on every split) + csv data."""
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("scale")
    tok = Tokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    cfg = BertConfig.preset(
        "tiny", vocab_size=len(tok), max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    BertModel(cfg).save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    rows = [("good fine great film", "1"), ("bad awful poor", "0"), ("a fine cast", "1"), ("the plot", "0")]
    rows = [(f"{t} {i % 7}", y) for i in range(12) for t, y in rows]  # 48 rows of varied length
    for name in ("train", "dev"):
        (root / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    return root


def _base(tiny: Path) -> list:
    return ["finetune", "classify", "--train", tiny / "train.csv", "--dev", tiny / "dev.csv",
            "--model", tiny / "model", "--batch-size", 4, "--lr", 1e-3, "--max-seq-length", 16,
            "--quiet", "--threads", 1]  # fmt: skip


def test_length_grouped_batches_split_over_ranks_equals_accumulation():
    items = list(range(50))
    lengths = [(i * 7) % 13 + 1 for i in items]
    one = LengthGroupedBatches(items, 4, lengths=lengths, seed=3, grad_accum=2)
    ranks = [LengthGroupedBatches(items, 4, lengths=lengths, seed=3, rank=r, world_size=2) for r in (0, 1)]
    assert one.steps_per_epoch() == ranks[0].steps_per_epoch() == 7  # ceil(13 batches / 2)
    for _ in range(3 * 7):  # three epochs, the ragged step included
        a, b = next(one), next(one)
        assert (a, b) == (next(ranks[0]), next(ranks[1]))
    # the plan of one epoch covers every item once; the ragged last step re-takes the epoch's first batch
    plan = one.plan(0)
    assert sorted(i for b in plan for i in b) == items
    assert one.indices(13)[1] == plan[0]
    with pytest.raises(ValueError):
        LengthGroupedBatches(items, 4, rank=2, world_size=2)


def test_two_process_ddp_equals_one_process_with_accumulation_2(tmp_path, capsys, tiny):
    one = _run(capsys, [*_base(tiny), "--out", tmp_path / "one", "--grad-accum", 2, "--epochs", 2])
    assert one["hyperparameters"]["grad_accum"] == 2 and one["steps"] == 12  # ceil(12 batches / 2) x 2 epochs
    env = child_env()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "bertkit", *map(str, _base(tiny)), "--out", str(tmp_path / "two"), "--epochs", "2"]  # fmt: skip
    two = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    res = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert res["world_size"] == 2 and one["world_size"] == 1 and res["device"] == one["device"] == "cpu"
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 13))
    for (_, x), (_, y) in zip(a, b):
        assert abs(x - y) <= 1e-5
    assert res["metrics"] == pytest.approx(one["metrics"], abs=1e-6)


def test_max_steps_eval_every_and_keep_best(tmp_path, capsys, tiny):
    res = _run(capsys, [*_base(tiny), "--out", tmp_path / "o", "--max-steps", 9, "--eval-every", 3,
                        "--keep-best", "--lr", 3e-3])  # fmt: skip
    assert res["steps"] == 9
    evals = [json.loads(x) for x in (tmp_path / "o" / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [3, 6, 9]
    best = max(evals, key=lambda e: (e["accuracy"], -e["step"]))  # the first of equal scores is kept
    assert res["best"] == {"step": best["step"], "metric": "accuracy", "score": best["accuracy"]}
    assert [e["is_best"] for e in evals][: evals.index(best) + 1][-1] == 1.0
    # the saved model is the kept one: its dev accuracy is the best evaluation's
    assert res["metrics"]["accuracy"] == pytest.approx(best["accuracy"])
    assert (tmp_path / "o" / "best" / "model.safetensors").is_file()


def test_flag_combinations_are_user_errors(tmp_path, capsys, tiny):
    assert main([*map(str, _base(tiny)), "--out", str(tmp_path / "a"), "--keep-best"]) == 2
    assert "--eval-every" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main([*map(str, _base(tiny)), "--out", str(tmp_path / "b"), "--precision", "fp16"]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err
    for bad in (["--grad-accum", "0"], ["--max-steps", "-1"]):
        with pytest.raises(SystemExit) as e:
            main([*map(str, _base(tiny)), "--out", str(tmp_path / "c"), *bad])
        assert e.value.code == 2
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ precision


def test_precision_choices():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert make_scaler("fp32", cpu) is None and make_scaler("bf16", gpu) is None
    assert make_scaler("fp16", cpu) is None  # never a scaler off CUDA (fp16 is refused there anyway)
    with pytest.raises(ValueError, match="CUDA"):
        check_precision("fp16", cpu)
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("fp8", cpu)
    check_precision("fp16", gpu)  # accepted on a GPU device
    assert not torch.is_autocast_enabled("cpu")
    with autocast("bf16", cpu):
        assert torch.is_autocast_enabled("cpu")
    with autocast("fp32", cpu):
        assert not torch.is_autocast_enabled("cpu")


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x, y):
        return ((self.lin(x) - y) ** 2).mean()


def _toy_data(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return [{"x": x[i], "y": x[i].sum(0, keepdim=True)} for i in range(n)]


def _toy_trainer(tmp_path, name, scaler=None, poison_step=None):
    torch.manual_seed(0)
    model = _Toy()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _toy_data()

    def collate(items):
        return {k: torch.stack([it[k] for it in items]) for k in items[0]}

    calls = {"n": 0}

    def loss_fn(m, batch):
        calls["n"] += 1
        loss = m(**batch)
        if poison_step is not None and calls["n"] == poison_step:
            loss = loss * float("inf")  # an overflowing step, as fp16 gradients can overflow
        return loss

    batches = LengthGroupedBatches(data, 4, collate, lengths=[1] * len(data), seed=0)
    t = Trainer(model, opt, None, train_batches=batches, out_dir=tmp_path / name, max_steps=8, loss_fn=loss_fn,
                log_every=1, progress=False, plot=False, clip_norm=None)  # fmt: skip
    t.scaler = scaler  # the Trainer's fp16 path, exercised on CPU with a CPU scaler
    return t, model


def test_gradient_scaler_path_trains_like_unscaled_and_skips_overflow(tmp_path):
    ref, ref_model = _toy_trainer(tmp_path, "ref")
    ref.fit()
    scaled, scaled_model = _toy_trainer(tmp_path, "scaled", torch.amp.GradScaler("cpu", init_scale=2.0**10))
    scaled.fit()
    # scaling by a power of two and unscaling is exact: the same updates
    assert [x for _, x in _losses(tmp_path / "scaled")] == pytest.approx(
        [x for _, x in _losses(tmp_path / "ref")], rel=1e-6
    )
    torch.testing.assert_close(scaled_model.lin.weight, ref_model.lin.weight)

    bad, bad_model = _toy_trainer(tmp_path, "bad", torch.amp.GradScaler("cpu", init_scale=2.0**10), 3)
    summary = bad.fit()
    assert bad.scaler.get_scale() == 2.0**9  # the overflow halved the scale
    assert summary["nonfinite_steps"] == 1 and summary["steps"] == 8  # skipped, counted, run continued
    assert all(torch.isfinite(p).all() for p in bad_model.parameters())


def test_best_keeper_saves_resumes_and_restores(tmp_path):
    from bertkit.tasks.training import BestKeeper

    torch.manual_seed(0)
    model = _Toy()
    keeper = BestKeeper(tmp_path, "f1", resume=False, is_main=True)
    assert keeper.update(model, 3, {"f1": 0.5}) is True
    best_weight = model.lin.weight.detach().clone()
    with torch.no_grad():
        model.lin.weight.add_(1.0)
    assert keeper.update(model, 6, {"f1": 0.5}) is False  # not better: the first of equal scores stays
    assert keeper.update(model, 9, {"f1": float("nan")}) is False
    assert keeper.update(model, 9, {"accuracy": 0.9}) is False  # the metric is absent
    resumed = BestKeeper(tmp_path, "f1", resume=True, is_main=True)  # a resumed run continues from it
    assert resumed.best == {"step": 3, "metric": "f1", "score": 0.5}
    assert resumed.restore(model) == resumed.best
    torch.testing.assert_close(model.lin.weight, best_weight)
    BestKeeper(tmp_path, "f1", resume=False, is_main=True)  # a fresh run drops an earlier run's best
    assert not (tmp_path / "best").exists()
