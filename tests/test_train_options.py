"""The Trainer's options in five frozen groups; a field given as a keyword of its own sets it in its group."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

from bertkit.train import Checkpointing, Numerics, Parallel, Reporting, Schedule, Trainer


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        return {"loss": ((self.lin(self.drop(x)) - y) ** 2).mean()}


def batches(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    return [{"x": torch.randn(8, 4, generator=g), "y": torch.randn(8, 1, generator=g)} for _ in range(n)]


def trainer(out, **options) -> Trainer:
    torch.manual_seed(0)
    model = Toy()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Trainer(model, opt, train_batches=batches(6), out_dir=out, **options)


def test_groups_and_their_fields_as_keywords_train_alike(tmp_path):
    grouped = trainer(
        tmp_path / "grouped",
        schedule=Schedule(max_steps=6, grad_accum=2, seed=3),
        numerics=Numerics(clip_norm=0.5),
        reporting=Reporting(log_every=1, progress=False, plot=False, desc="toy"),
        checkpointing=Checkpointing(checkpoint_every=2, keep_last=1),
    )
    flat = trainer(
        tmp_path / "flat", max_steps=6, grad_accum=2, seed=3, clip_norm=0.5, log_every=1, progress=False,
        plot=False, desc="toy", checkpoint_every=2, keep_last=1,
    )  # fmt: skip
    assert grouped.schedule == flat.schedule == Schedule(max_steps=6, grad_accum=2, seed=3)
    assert grouped.numerics == flat.numerics and grouped.reporting == flat.reporting
    assert grouped.checkpointing == flat.checkpointing == Checkpointing(2, 1)
    grouped.fit()
    flat.fit()

    def records(run: str) -> list[tuple]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, lines)]

    assert records("grouped") == records("flat") and len(records("flat")) == 3  # 6 batches, 2 a step
    assert [p.name for p in (tmp_path / "grouped" / "checkpoints").iterdir()] == ["step-00000003.pt"]


def test_a_field_keyword_sets_that_field_of_the_given_group(tmp_path):
    t = trainer(
        tmp_path, schedule=Schedule(max_steps=9, seed=4), max_steps=2, distributed="fsdp", progress=False
    )
    assert t.schedule == Schedule(max_steps=2, seed=4) and t.max_steps == 2
    assert t.parallel == Parallel(strategy="fsdp") and t.reporting.progress is False
    assert t.distributed == "none"  # one process: no wrapper whatever the strategy


def test_groups_are_frozen_and_bad_options_are_refused(tmp_path):
    with pytest.raises(dataclasses.FrozenInstanceError):
        Schedule(max_steps=1).max_steps = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="nonfinite must be 'skip' or 'stop'"):
        Numerics(nonfinite="ignore")
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_step'"):
        trainer(tmp_path, max_step=3)
    with pytest.raises(TypeError, match=r"needs schedule=Schedule\(max_steps=...\) or max_steps="):
        trainer(tmp_path, precision="fp32")
    with pytest.raises(TypeError, match="numerics must be a Numerics, got Schedule"):
        trainer(tmp_path, max_steps=1, numerics=Schedule(max_steps=1))
