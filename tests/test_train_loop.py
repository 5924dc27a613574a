"""The generic trainer and its parts on a toy regression model (it knows nothing about BERT)."""

from __future__ import annotations

import json
import math
import signal
import threading

import pytest
import torch
from torch import nn

from bertkit.train import (
    Batches,
    Lamb,
    LengthGroupedBatches,
    NonFiniteLossError,
    Trainer,
    build_optimizer,
    linear_schedule,
    list_checkpoints,
    param_groups,
    warmup_steps_of_ratio,
)
from bertkit.train.stop import StopSignals, TrainingStopped


class ToyData:
    """y = x @ w_true + noise, deterministic per index; records set_epoch calls."""

    def __init__(self, n=64, d=8):
        g = torch.Generator().manual_seed(123)
        self.x = torch.randn(n, d, generator=g)
        self.y = self.x @ (0.3 * torch.randn(d, 1, generator=g)) + 0.01 * torch.randn(n, 1, generator=g)
        self.epochs = []

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}

    def set_epoch(self, e):
        self.epochs.append(e)


def collate(items):
    return {"x": torch.stack([it["x"] for it in items]), "y": torch.stack([it["y"] for it in items])}


class Toy(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.lin = nn.Linear(d, 16)
        self.norm = nn.LayerNorm(16)
        self.out = nn.Linear(16, 1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, y=None):
        pred = self.out(self.drop(torch.tanh(self.norm(self.lin(x)))))
        return {"loss": ((pred - y) ** 2).mean(), "pred": pred}


def toy_loss(model, batch):
    out = model(**batch)
    err = (out["pred"] - batch["y"]).abs()
    return out["loss"], {"mae": err.mean(), "close": (float((err < 0.5).sum()), float(err.numel()))}


def make_trainer(tmp_path, steps=20, seed=0, **kw):
    torch.manual_seed(seed)
    model = Toy()
    data = ToyData()
    batches = Batches(data, 8, collate, seed=seed, grad_accum=kw.get("grad_accum", 1))
    opt = build_optimizer(model, "adamw", lr=3e-2)
    sched = linear_schedule(opt, 2, steps)
    kw.setdefault("progress", False)
    kw.setdefault("loss_fn", toy_loss)
    return Trainer(
        model, opt, sched, train_batches=batches, out_dir=tmp_path, max_steps=steps,
        log_every=1, seed=seed, **kw,
    )  # fmt: skip


def read_losses(path):
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


def test_param_groups_exclude_bias_and_layernorm():
    m = Toy()
    groups = param_groups(m, 0.01)
    decay = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.01 and groups[1]["weight_decay"] == 0.0
    assert id(m.lin.weight) in decay and id(m.out.weight) in decay
    assert id(m.lin.bias) not in decay and id(m.norm.weight) not in decay
    opt = build_optimizer(m, "adamw", lr=1e-3)
    assert opt.defaults["eps"] == 1e-6


def test_lr_by_prefix_gives_a_layer_its_own_rate_under_the_schedule():
    m = Toy()
    opt = build_optimizer(m, "adamw", lr=1e-3, lr_by_prefix={"out.": 0.5})
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    assert by_param[id(m.out.weight)]["lr"] == 0.5 and by_param[id(m.out.weight)]["weight_decay"] == 0.01
    assert by_param[id(m.out.bias)]["lr"] == 0.5 and by_param[id(m.out.bias)]["weight_decay"] == 0.0
    assert by_param[id(m.lin.weight)]["lr"] == 1e-3 and by_param[id(m.norm.weight)]["lr"] == 1e-3
    assert len(by_param) == len(list(m.parameters()))  # every parameter in exactly one group
    sched = linear_schedule(opt, 2, 10)
    opt.step()
    sched.step()  # the second of 2 warm-up steps runs at half the peak: both rates scale
    assert by_param[id(m.out.weight)]["lr"] == 0.25 and by_param[id(m.lin.weight)]["lr"] == 5e-4


def _rates(sched_of, steps: int) -> list[float]:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = sched_of(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_linear_warmup_then_decay():
    lrs = _rates(lambda o: linear_schedule(o, warmup_steps=4, total_steps=12), 12)
    assert lrs[:5] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])  # the first update at rate 0, as BERT's
    assert lrs[4:] == pytest.approx([1.0 - i / 8 for i in range(8)])
    assert lrs.count(1.0) == 1  # one step at the peak, not two


@pytest.mark.parametrize("warmup_ratio,total", [(0.1, 16), (0.06, 50), (0.0, 7), (0.5, 3)])
def test_warmup_schedule_equals_transformers(warmup_ratio, total):
    """The same rate at every step as transformers' linear schedule with its warm-up rounding (what
    sentence-transformers' trainer and HF's run_glue use), so a run compared with theirs differs only in data."""
    tf_opt = pytest.importorskip("transformers.optimization")
    from transformers import TrainingArguments

    warmup = warmup_steps_of_ratio(warmup_ratio, total)
    try:  # transformers >= 5: a float warmup_steps < 1 is the ratio
        targs = TrainingArguments(output_dir="unused", warmup_steps=warmup_ratio)
    except (TypeError, ValueError):  # transformers 4: warmup_ratio
        targs = TrainingArguments(output_dir="unused", warmup_ratio=warmup_ratio)
    theirs = targs.get_warmup_steps(total)
    assert warmup == theirs
    ours = _rates(lambda o: linear_schedule(o, warmup, total), total)
    ref = _rates(lambda o: tf_opt.get_linear_schedule_with_warmup(o, theirs, total), total)
    assert ours == pytest.approx(ref, abs=1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        warmup_steps_of_ratio(1.5, total)


def test_lamb_minimises_and_uses_trust_ratio():
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(10, 10))
    opt = Lamb([w], lr=0.05, weight_decay=0.0)
    target = torch.randn(10, 10)
    first = None
    for _ in range(200):
        loss = ((w - target) ** 2).sum()
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.05 * first
    # zero weights: the trust ratio falls back to 1 (no division by zero)
    z = nn.Parameter(torch.zeros(3))
    opt = Lamb([z], lr=0.1)
    z.grad = torch.ones(3)
    opt.step()
    assert torch.isfinite(z).all() and (z < 0).all()


def test_batches_split_over_ranks_equals_accumulation():
    data = ToyData(n=40)
    one = Batches(data, 4, seed=3, grad_accum=2)
    ranks = [Batches(data, 4, seed=3, rank=r, world_size=2) for r in range(2)]
    for _ in range(12):  # crosses an epoch boundary (40 // 8 = 5 steps per epoch)
        a = one.indices(one.consumed)[1] + one.indices(one.consumed + 1)[1]
        one.consumed += 2
        b = sum((rk.indices(rk.consumed)[1] for rk in ranks), [])
        for rk in ranks:
            rk.consumed += 1
        assert a == b
    # every example once per epoch, in a seed-dependent order
    c = Batches(data, 8, seed=3)
    epoch0 = sum((c.indices(i)[1] for i in range(5)), [])
    assert sorted(epoch0) == list(range(40)) and epoch0 != list(range(40))
    assert c.indices(5)[0] == 1 and c.indices(5)[1] != c.indices(0)[1]
    d = Batches(data, 8, seed=3)
    d.load_state_dict(c.state_dict())
    assert d.indices(7) == c.indices(7)
    list(zip(range(6), d))
    assert data.epochs == [0, 1]


def test_length_grouped_batches_cover_each_epoch_with_little_padding_and_resume():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 200, (1000,), generator=g).tolist()
    items = list(range(len(lengths)))
    a = LengthGroupedBatches(items, 16, lengths=lengths, seed=5, bucket_batches=10)
    assert a.steps_per_epoch() == 63  # ceil(1000 / 16): nothing dropped
    epoch0 = [next(a) for _ in range(63)]
    assert sorted(i for b in epoch0 for i in b) == items  # every item once per epoch
    assert sorted(len(b) for b in epoch0)[:1] == [8]  # the one short batch (1000 = 62 * 16 + 8)

    def padding(batches):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)

    shuffled = Batches(items, 16, seed=5)
    plain = [next(shuffled) for _ in range(62)]
    assert padding(epoch0) < 0.25 * padding(plain)  # grouped by length within chunks of 160 items
    # short and long batches are interleaved (the batch order is shuffled, not rising within a chunk)
    maxes = [max(lengths[i] for i in b) for b in epoch0[:10]]
    assert maxes != sorted(maxes)
    epoch1 = [next(a) for _ in range(63)]
    assert epoch1 != epoch0 and sorted(i for b in epoch1 for i in b) == items
    # the same seed gives the same stream; a stream restored from state_dict continues exactly
    b = LengthGroupedBatches(items, 16, lengths=lengths, seed=5, bucket_batches=10)
    assert [next(b) for _ in range(126)] == epoch0 + epoch1
    c = LengthGroupedBatches(items, 16, lengths=lengths, seed=5, bucket_batches=10)
    c.load_state_dict(a.state_dict())
    assert [next(c) for _ in range(70)] == [next(b) for _ in range(70)]
    assert LengthGroupedBatches(items, 16, lengths=lengths, seed=6).plan(0) != a.plan(0)


def test_batch_streams_warn_when_resumed_with_settings_that_change_the_order(caplog):
    items = list(range(64))
    for make, other in (
        (lambda: Batches(items, 4, seed=1, grad_accum=2), lambda: Batches(items, 4, seed=1, grad_accum=1)),
        (
            lambda: LengthGroupedBatches(items, 8, lengths=items),
            lambda: LengthGroupedBatches(items, 4, lengths=items),
        ),
    ):
        a = make()
        next(a), next(a)
        with caplog.at_level("WARNING", logger="bertkit"):
            caplog.clear()
            same = make()
            same.load_state_dict(a.state_dict())
            assert not caplog.records and same.consumed == 2 and next(same) == next(a)
            changed = other()
            changed.load_state_dict(a.state_dict())
        assert "the data order changes" in caplog.text and changed.consumed == 3


def test_trainer_learns_logs_checkpoints_and_plots(tmp_path):
    tr = make_trainer(tmp_path, steps=30, checkpoint_every=10, keep_last=2, eval_every=10,
                      eval_fn=lambda m: {"loss": 1.0})  # fmt: skip
    res = tr.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31))
    for key in ("loss", "lr", "tokens_per_s", "mae", "close", "grad_norm"):
        assert key in rows[0]
    assert rows[-1]["loss"] < 0.5 * rows[0]["loss"]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [20, 30]
    assert (tmp_path / "curves.png").stat().st_size > 1000
    evals = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [10, 20, 30]
    assert res["steps"] == 30 and res["distributed"] == "none" and res["eval"]["step"] == 30


def test_tokens_per_second_covers_the_whole_step(tmp_path):
    import time

    def slow_loss(model, batch):
        time.sleep(0.02)  # every step takes at least 20 ms
        return toy_loss(model, batch)

    tr = make_trainer(tmp_path, steps=5, loss_fn=slow_loss, tokens_fn=lambda batch: 100)
    tr.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows]
    assert len(rates) == 5 and all(0 < x <= 100 / 0.02 for x in rates), rates


def test_resume_in_process_is_bitwise(tmp_path):
    full = make_trainer(tmp_path / "a", steps=16, grad_accum=2)
    full.fit()
    part = make_trainer(tmp_path / "b", steps=16, grad_accum=2, checkpoint_every=5)
    part.max_steps = 7  # "crash" after step 7; the checkpoint is at 5
    part.fit()
    (tmp_path / "b" / "checkpoints" / "step-00000007.pt").unlink()  # only the periodic one survives
    again = make_trainer(tmp_path / "b", steps=16, grad_accum=2, checkpoint_every=5, seed=99)  # other init
    res = again.fit(resume=True)
    assert res["resumed_from"].endswith("step-00000005.pt")
    assert read_losses(tmp_path / "a" / "metrics.jsonl") == read_losses(tmp_path / "b" / "metrics.jsonl")
    for p, q in zip(full.model.parameters(), again.model.parameters()):
        assert torch.equal(p, q)


def test_nonfinite_steps_are_skipped_then_stop(tmp_path):
    calls = {"n": 0}

    def sometimes_nan(model, batch):
        calls["n"] += 1
        loss, mets = toy_loss(model, batch)
        return (loss * float("nan") if calls["n"] in (3, 4) else loss), mets

    tr = make_trainer(tmp_path / "skip", steps=8, loss_fn=sometimes_nan, checkpoint_every=4)
    res = tr.fit()
    assert res["nonfinite_steps"] == 2
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())
    rows = [json.loads(line) for line in (tmp_path / "skip" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["loss"]) for r in rows if r["step"] not in (3, 4))

    def always_nan(model, batch):
        loss, mets = toy_loss(model, batch)
        return loss * float("inf"), mets

    tr = make_trainer(tmp_path / "stop", steps=8, loss_fn=always_nan, max_nonfinite=2, checkpoint_every=1)
    with pytest.raises(NonFiniteLossError, match="lower --lr"):
        tr.fit()
    assert list_checkpoints(tmp_path / "stop") == [] or all(
        torch.isfinite(t).all()
        for _, p in list_checkpoints(tmp_path / "stop")
        for t in torch.load(p, weights_only=False)["model"].values()
    )
    tr = make_trainer(tmp_path / "stop1", steps=8, loss_fn=always_nan, nonfinite="stop")
    with pytest.raises(NonFiniteLossError, match="non-finite training step 1"):
        tr.fit()


def test_bf16_autocast_runs_on_cpu(tmp_path):
    tr = make_trainer(tmp_path, steps=4, precision="bf16")
    res = tr.fit()
    assert math.isfinite(res["loss"])
    with pytest.raises(ValueError, match="fp16 needs a CUDA"):
        make_trainer(tmp_path, steps=4, precision="fp16", device="cpu")


def test_batch_streams_draw_through_getitems_when_the_dataset_has_it():
    class Drawn:
        def __init__(self):
            self.calls = []

        def __len__(self):
            return 12

        def __getitem__(self, i):
            raise AssertionError("items must be drawn a batch at a time")

        def __getitems__(self, idx):
            self.calls.append(list(idx))
            return [i * 10 for i in idx]

    for make in (
        lambda d: Batches(d, 4, seed=1),
        lambda d: LengthGroupedBatches(d, 4, lengths=[1] * 12, seed=1),
    ):
        d = Drawn()
        batch = next(make(d))
        assert len(d.calls) == 1 and batch == [i * 10 for i in d.calls[0]] and len(batch) == 4


def test_a_new_run_into_a_checkpointed_dir_is_a_user_error(tmp_path):
    from bertkit.errors import UserError

    make_trainer(tmp_path, steps=4, checkpoint_every=2).fit()
    with pytest.raises(UserError, match="--resume"):  # the CLI prints it and exits 2
        make_trainer(tmp_path, steps=4, checkpoint_every=2).fit()
    assert make_trainer(tmp_path, steps=4, checkpoint_every=2).fit(resume=True)["steps"] == 4


def test_a_stop_signal_checkpoints_the_step_in_progress_and_resume_is_bitwise(tmp_path):
    """SIGTERM mid-run (a reclaimed spot machine, a scheduler's limit): the step in progress finishes, a
    checkpoint of it is written between the periodic ones, and fit raises TrainingStopped, which an
    ``except Exception`` does not swallow; resuming equals the uninterrupted run."""
    full = make_trainer(tmp_path / "full", steps=12, grad_accum=2)
    full.fit()

    def terminate_after_step_7(rec):
        if rec["step"] == 7:
            signal.raise_signal(signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    stopped = make_trainer(
        tmp_path / "cut", steps=12, grad_accum=2, checkpoint_every=5, callbacks=[terminate_after_step_7]
    )
    with pytest.raises(TrainingStopped) as info:
        try:
            stopped.fit()
        except Exception:  # noqa: BLE001 - what a job runner around many runs does
            pytest.fail("TrainingStopped was caught as an Exception")
    cut = tmp_path / "cut" / "checkpoints"
    assert (info.value.step, info.value.exit_status, info.value.checkpoint) == (
        7,
        143,
        cut / "step-00000007.pt",
    )
    assert "stopped by SIGTERM after step 7" in str(info.value)
    assert [p.name for _, p in list_checkpoints(tmp_path / "cut")] == ["step-00000005.pt", "step-00000007.pt"]
    assert signal.getsignal(signal.SIGTERM) is before  # the run's handler is gone with the run

    again = make_trainer(tmp_path / "cut", steps=12, grad_accum=2, checkpoint_every=5, seed=99)  # other init
    assert again.fit(resume=True)["resumed_from"].endswith("step-00000007.pt")
    assert read_losses(tmp_path / "full" / "metrics.jsonl") == read_losses(tmp_path / "cut" / "metrics.jsonl")
    for p, q in zip(full.model.parameters(), again.model.parameters()):
        assert torch.equal(p, q)


@pytest.fixture
def ctrl_c_interrupts():
    """Python's own Ctrl-C handler, whatever this process inherited (a background job ignores SIGINT)."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def test_stop_signals_take_the_first_signal_and_leave_the_second_to_its_old_handler(ctrl_c_interrupts):
    """Ctrl-C once asks for a stop; Ctrl-C again interrupts at once, as without bertkit. Outside the main
    thread (where handlers cannot be set) and when disabled nothing changes."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert signal.getsignal(signal.SIGINT) is not before[0]
        signal.raise_signal(signal.SIGINT)
        assert stop.requested == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)  # the first SIGTERM: recorded, the first request kept
        assert stop.requested == signal.SIGINT
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before

    with StopSignals(enabled=False) as off:
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert off.requested is None
    seen = []
    thread = threading.Thread(target=lambda: seen.append(StopSignals().__enter__().requested))
    thread.start()
    thread.join()
    assert seen == [None] and (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
