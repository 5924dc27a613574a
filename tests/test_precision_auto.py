"""``precision="auto"``: bf16 only where it measured faster on this CPU and its loss agreed with fp32's;
the measurement leaves no trace in training; the choice is cached and overridable."""

from __future__ import annotations

import pytest
import torch

from bertkit import tuning
from bertkit.config import BertConfig
from bertkit.heads.pretraining import BertForPreTraining
from bertkit.train import precision as P

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BERTKIT_PRECISION", raising=False)


def _model_and_batch():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=120)).train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 120, (4, 16), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    return model, {"input_ids": ids, "labels": labels, "next_sentence_label": torch.tensor([0, 1, 0, 1])}


def _loss(model, batch):
    return model(**batch).loss


def test_auto_measures_without_disturbing_training(monkeypatch):
    monkeypatch.setattr(P, "_cpu_has_bf16", lambda: True)  # measured even on a CPU without native bf16
    model, batch = _model_and_batch()
    rng = torch.get_rng_state()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    picked = P.choose_precision(model, batch, _loss, CPU)
    assert picked in ("fp32", "bf16")
    assert torch.equal(torch.get_rng_state(), rng)  # dropout draws of the real run are not shifted
    assert all(p.grad is None for p in model.parameters()) and model.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())
    (entry,) = [v for k, v in tuning.cached_choices().items() if k.startswith("precision:")]
    assert entry["choice"] == picked
    assert abs(entry["details"]["loss_bf16"] - entry["details"]["loss_fp32"]) < 0.05
    assert {"fp32_ms", "bf16_ms"} <= set(entry["details"])  # both timed
    bf16_ms, fp32_ms = entry["details"]["bf16_ms"], entry["details"]["fp32_ms"]
    # the cache rounds both to 0.1 ms (up to 0.05 each): within that of the 0.9 threshold either choice fits
    rounding = 0.05 * (1 + 0.9)
    if abs(bf16_ms - 0.9 * fp32_ms) > rounding:
        assert (picked == "bf16") == (bf16_ms < 0.9 * fp32_ms)


def test_a_disagreeing_bf16_loss_keeps_fp32(monkeypatch):
    monkeypatch.setattr(P, "_cpu_has_bf16", lambda: True)
    model, batch = _model_and_batch()

    def loss_off_under_autocast(m, b):
        return m(**b).loss + (1.0 if torch.is_autocast_enabled("cpu") else 0.0)

    assert P.choose_precision(model, batch, loss_off_under_autocast, CPU) == "fp32"
    (entry,) = [v for k, v in tuning.cached_choices().items() if k.startswith("precision:")]
    assert entry["details"]["reason"] == "the bf16 loss disagrees"


def test_no_native_bf16_or_no_cpu_means_fp32_unmeasured(monkeypatch):
    model, batch = _model_and_batch()

    def boom(m, b):
        raise AssertionError("nothing may be measured")

    monkeypatch.setattr(P, "_cpu_has_bf16", lambda: False)
    assert P.choose_precision(model, batch, boom, CPU) == "fp32"
    monkeypatch.setattr(P, "_cpu_has_bf16", lambda: True)
    assert P.choose_precision(model, batch, boom, torch.device("meta")) == "fp32"
    monkeypatch.setenv("BERTKIT_PRECISION", "bf16")  # the override wins without measuring
    assert P.choose_precision(model, batch, boom, CPU) == "bf16"


def test_trainer_resolves_auto_at_the_first_batch(tmp_path, monkeypatch):
    from bertkit.train import Trainer, build_optimizer

    monkeypatch.setenv("BERTKIT_PRECISION", "bf16")
    model, batch = _model_and_batch()
    trainer = Trainer(
        model,
        build_optimizer(model, "adamw", lr=1e-3),
        train_batches=iter([batch, batch]),
        out_dir=tmp_path / "run",
        max_steps=2,
        precision="auto",
        progress=False,
        plot=False,
    )
    assert trainer.precision == "auto"
    trainer.fit()
    assert trainer.precision == "bf16" and trainer.step == 2


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of"):
        P.check_precision("fp8", CPU)
