"""A fine-tuning cell of a lab matrix stopped part-way (SIGTERM, or killed after a checkpoint) resumes in its
next sitting where it stopped, and its result equals the one an uninterrupted run gives; a cell whose settings
or starting weights changed starts again. The cell's seconds count every sitting."""

from __future__ import annotations

import json
import random
import shutil
import signal
from pathlib import Path

import pytest
from test_experiment import MINIMAL

from bertkit.train import loop
from bertkit.train.stop import TrainingStopped
from lab.experiment import finetune_cells
from lab.experiment.finetune_cells import resume_or_start, run_finetune, run_identity
from lab.experiment.matrix import load_matrix

# the lab tests' minimal matrix, on a small SST-2 split below, one seed at one rate
MATRIX = (
    MINIMAL.replace('data_root = "."', 'data_root = "data"')
    .replace("seeds = [1, 2]", "seeds = [1]")
    .replace("lr = [1e-4, 3e-4]", "lr = [3e-4]\nepochs = 2\nbatch_size = 8\nmax_seq_length = 32")
)


def _sst2(file: Path, n: int, seed: int) -> None:
    """A small SST-2 split whose label follows its words (so the scores move as the model learns)."""
    rng = random.Random(seed)
    good, bad = ["good", "fine", "great", "nice"], ["bad", "poor", "awful", "dull"]
    rows = ["sentence\tlabel"]
    for _ in range(n):
        label = rng.randint(0, 1)
        words = [rng.choice(good if label else bad) for _ in range(3)] + ["the", "film"]
        rng.shuffle(words)
        rows.append(f"{' '.join(words)}\t{label}")
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("\n".join(rows) + "\n", encoding="utf-8")


def _squad(file: Path, articles: int) -> None:
    """A small SQuAD v1.1 file: each article asks after the colour of a few things its paragraph names."""
    rng = random.Random(articles)
    things, colours = ["file", "list", "line", "name", "value", "table"], ["red", "blue", "green", "black"]
    data = []
    for a in range(articles):
        said = {t: rng.choice(colours) for t in rng.sample(things, 4)}
        context = " ".join(f"the {t} is {c} ." for t, c in said.items())
        qas = [{"id": f"{a}-{t}", "question": f"what is the {t} ?",
                "answers": [{"text": c, "answer_start": context.index(f"the {t} is {c}") + len(f"the {t} is ")}]}
               for t, c in said.items()]  # fmt: skip
        data.append({"title": f"a{a}", "paragraphs": [{"context": context, "qas": qas}]})
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")


SQUAD_TASK = """
[[task]]
name = "SQuAD"
kind = "squad"
file = "squad.json"
dev_articles = 4
lr = [3e-4]
epochs = 2
batch_size = 8
max_seq_length = 48
doc_stride = 16
max_query_length = 12
"""


@pytest.fixture
def matrix(tmp_path, tiny_model):
    _sst2(tmp_path / "data" / "glue" / "SST-2" / "train.tsv", 96, seed=1)
    _sst2(tmp_path / "data" / "glue" / "SST-2" / "dev.tsv", 40, seed=0)
    _squad(tmp_path / "data" / "squad.json", 24)
    (tmp_path / "m.toml").write_text(MATRIX + SQUAD_TASK)
    return load_matrix(tmp_path / "m.toml")


def _model(out: Path, tiny_model: Path) -> None:
    shutil.copytree(tiny_model, out / "pretrain" / "a" / "model")


@pytest.mark.parametrize("task", ["SST-2", "SQuAD"])
def test_a_stopped_fine_tuning_cell_resumes_to_the_uninterrupted_result(
    matrix, tmp_path, tiny_model, monkeypatch, task
):
    monkeypatch.setattr(finetune_cells, "CHECKPOINT_EVERY", 5)
    cell = matrix.cell(f"finetune/a/{task}/seed1")
    whole, cut, plain = tmp_path / "whole", tmp_path / "cut", tmp_path / "plain"
    for out in (whole, cut, plain):
        _model(out, tiny_model)
    reference = run_finetune(matrix, cell, whole, {}, progress=False)
    steps = reference["steps"]
    assert steps >= 10 and "sittings" not in reference and reference["primary"] > 0, reference
    # the cells finished before checkpoints were written computed the same: checkpointing draws no randomness
    with monkeypatch.context() as patched:
        patched.setattr(finetune_cells, "CHECKPOINT_EVERY", 0)
        unchecked = run_finetune(matrix, cell, plain, {}, progress=False)
    assert (unchecked["metrics"], unchecked["predictions_sha256"]) == (
        reference["metrics"], reference["predictions_sha256"],
    )  # fmt: skip

    trainer_init = loop.Trainer.__init__

    def stop_after_step_7(self, *args, callbacks=(), **kwargs):
        def stop(rec):
            if rec["step"] == 7:
                signal.raise_signal(signal.SIGTERM)

        trainer_init(self, *args, callbacks=[*callbacks, stop], **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(loop.Trainer, "__init__", stop_after_step_7)
        with pytest.raises(TrainingStopped, match="after step 7"):
            run_finetune(matrix, cell, cut, {}, progress=False)
    work = cut / cell.name
    assert sorted(p.name for p in work.rglob("step-*.pt")) == ["step-00000005.pt", "step-00000007.pt"]
    first_sitting = json.loads((work / "cpu.json").read_text())
    assert first_sitting["sittings"] == 1 and first_sitting["cpu_s"] > 0

    seen = []

    def record_steps(self, *args, callbacks=(), **kwargs):
        trainer_init(self, *args, callbacks=[*callbacks, lambda rec: seen.append(rec["step"])], **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(loop.Trainer, "__init__", record_steps)
        resumed = run_finetune(matrix, cell, cut, {}, progress=False)
    assert seen[0] == 8 and seen[-1] == steps  # it went on from the checkpoint of step 7
    assert resumed["sittings"] == 2 and resumed["cpu_s"] >= first_sitting["cpu_s"]
    assert (resumed["primary"], resumed["metrics"], resumed["steps"]) == (
        reference["primary"], reference["metrics"], steps,
    )  # fmt: skip
    assert resumed["predictions_sha256"] == reference["predictions_sha256"]  # the same answers, one by one
    assert not work.exists()  # scores kept, the run folder removed as before


def test_a_run_folder_of_other_settings_or_other_weights_is_started_again(matrix, tmp_path, tiny_model):
    cell = matrix.cell("finetune/a/SST-2/seed1")
    _model(tmp_path / "out", tiny_model)
    model_dir = tmp_path / "out" / "pretrain" / "a" / "model"
    work = tmp_path / "out" / cell.name
    identity = run_identity(matrix, cell, 3e-4, model_dir)
    assert resume_or_start(work, identity) is False  # nothing to resume: a fresh, marked folder
    (work / "runs" / "x" / "checkpoints").mkdir(parents=True)
    (work / "runs" / "x" / "checkpoints" / "step-00000005.pt").write_bytes(b"")
    assert resume_or_start(work, identity) is True
    assert resume_or_start(work, run_identity(matrix, cell, 1e-4, model_dir)) is False  # another rate
    assert not (work / "runs").exists()  # the other run's checkpoint is gone

    (work / "runs" / "x" / "checkpoints").mkdir(parents=True)
    (work / "runs" / "x" / "checkpoints" / "step-00000005.pt").write_bytes(b"")
    (work / "run.json").write_text(identity)
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b" ")  # a rebuilt model: other weights
    assert resume_or_start(work, run_identity(matrix, cell, 3e-4, model_dir)) is False
