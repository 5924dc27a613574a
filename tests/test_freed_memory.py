"""bertkit.kernels.freed_memory: a training process reuses its freed large blocks instead of faulting them in
again every step (glibc); BERTKIT_KEEP_FREED_MEMORY=0 leaves malloc alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bertkit.kernels.freed_memory import _glibc

PROBE = """
import json, resource, torch
from bertkit.kernels.freed_memory import keep_freed_memory
applied = keep_freed_memory()
assert keep_freed_memory() == applied  # idempotent
def cycle():  # a step's worth: a 64 MB activation allocated, written and freed
    x = torch.empty(16 * 2**20)
    x.fill_(1.0)
    del x
for _ in range(20):  # the first steps grow the heap until freed blocks fit the next requests
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(json.dumps({"applied": applied, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _probe(setting: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("BERTKIT_KEEP_FREED_MEMORY", None)
    if setting is not None:
        env["BERTKIT_KEEP_FREED_MEMORY"] = setting
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(_glibc() is None, reason="keeping freed memory is a glibc malloc setting; not glibc here")
def test_freed_blocks_are_reused_and_the_switch_turns_it_off():
    kept, default = _probe(None), _probe("0")
    pages = 10 * 64 * 2**20 // 4096  # what ten fresh 64 MB blocks fault in
    assert kept["applied"] is True and default["applied"] is False
    assert kept["faults"] < pages // 20  # the block is reused: almost no page is faulted in again
    assert default["faults"] > pages // 2  # glibc's default maps and faults each block afresh


def test_trainer_keeps_freed_memory_when_it_trains(tmp_path, monkeypatch):
    import torch

    from bertkit.train.loop import Trainer

    calls = []
    monkeypatch.setattr("bertkit.train.loop.keep_freed_memory", lambda: calls.append(1) or True)
    model = torch.nn.Linear(2, 1)
    batches = [{"x": torch.ones(4, 2)}] * 2

    def loss_fn(m, b):
        return m(b["x"]).pow(2).mean(), {}

    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), train_batches=batches, out_dir=tmp_path,
            max_steps=1, loss_fn=loss_fn, progress=False, plot=False).fit()  # fmt: skip
    assert calls == [1]


def test_bench_ours_only_row_runs_in_its_own_process_with_and_without_kept_memory():
    from benchmarks.bench_pretrain import ours_only_in_child

    default, kept = (ours_only_in_child("tiny", keep, 1, batch_size=4, seq=16) for keep in (False, True))
    assert "glibc's default malloc" in default["name"]
    assert ("freed memory kept" in kept["name"]) == (_glibc() is not None)
    assert default["model_flops_per_call"] == kept["model_flops_per_call"] > 0
