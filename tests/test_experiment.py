"""`python -m lab experiment`: matrix expansion, resumption, result files; the smoke matrix end to end."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from bertkit.errors import UserError
from lab.__main__ import main as lab_main
from lab.experiment import load_matrix, plan, read_results, run_matrix, select

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.toml"

MINIMAL = """
name = "t"
corpus = ["c.txt"]
data_root = "."
seeds = [1, 2]
[pretrain]
preset = "tiny"
tokens = 1000
[[model]]
name = "a"
objective = "mlm"
[[model]]
name = "a+bilstm"
from = "a"
head = { head_bilstm = true }
[[task]]
name = "SST-2"
kind = "glue"
lr = [1e-4, 3e-4]
"""


# MINIMAL with a second task: what pools by task (the ETA) or spans a model's tasks (the builds they read)
TWO_TASKS = MINIMAL + '[[task]]\nname = "SQuAD"\nkind = "squad"\nlr = [1e-4, 3e-4]\n'


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.toml"
    p.write_text(text)
    return p


def test_a_continued_model_takes_the_shape_of_the_model_it_continues(tmp_path):
    text = MINIMAL.replace('objective = "mlm"', 'objective = "mlm"\nmodel = { hidden_size = 256 }', 1)
    m = load_matrix(_write(tmp_path, text + '[[model]]\nname = "b"\ncontinue_from = "a"\n'))
    assert m.cell("pretrain/b").spec["model"] == {"hidden_size": 256}  # the ETA and the report see it
    assert m.cell("pretrain/b").cost == m.cell("pretrain/a").cost


def test_a_task_text_model_gets_its_own_corpus_cells(tmp_path):
    m = load_matrix(_write(tmp_path, MINIMAL + '[[model]]\nname = "t"\ntask_text = ["SST-2"]\n'))
    names = [c.name for c in m.cells]
    assert names.index("tasktext/t") < names.index("prepare/t") < names.index("pretrain/t")
    assert m.cell("prepare/t").needs == ["vocab", "tasktext/t"]
    assert m.cell("pretrain/t").needs == ["prepare/t"] and m.cell("pretrain/a").needs == ["prepare"]
    assert [t["name"] for t in m.cell("tasktext/t").spec["tasks"]] == ["SST-2"]


def test_matrix_expands_in_dependency_order(tmp_path):
    m = load_matrix(_write(tmp_path, MINIMAL))
    names = [c.name for c in m.cells]
    assert names[:3] == ["vocab", "prepare", "pretrain/a"]
    # a derived model (from = ...) has no pre-training cell of its own
    assert "pretrain/a+bilstm" not in names
    # a grid of two rates on the first seed, then every seed
    assert "finetune/a/SST-2/lr0.0001/seed1" in names and "finetune/a/SST-2/lr0.0003/seed1" in names
    final = m.cell("finetune/a+bilstm/SST-2/seed2")
    assert final.needs == [
        "pretrain/a",
        "finetune/a+bilstm/SST-2/lr0.0001/seed1",
        "finetune/a+bilstm/SST-2/lr0.0003/seed1",
    ]
    for c in m.cells:  # every cell comes after what it needs
        assert all(names.index(n) < names.index(c.name) for n in c.needs)


def test_eta_costs_follow_the_shape_and_objective_each_cell_trains(tmp_path):
    """The ETA's FLOP estimates: LTR predicts every token through the vocabulary decoder, MLM the masked share
    (the recipe's 40% for tiny unless the model sets its own), a ``model = {...}`` override's depth counts,
    and fine-tuning costs follow [pretrain]'s preset."""
    extra = """
[[model]]
name = "l"
objective = "ltr"
[[model]]
name = "deep"
objective = "mlm"
masked_lm_prob = 0.15
model = { num_hidden_layers = 4 }
"""
    m = load_matrix(_write(tmp_path, MINIMAL + extra))
    mlm, ltr, deep = (m.cell(f"pretrain/{n}").cost for n in ("a", "l", "deep"))
    # tiny, vocabulary 8192: encoder 393,216 parameters a token, output layer 1,064,960 a predicted token
    assert mlm == pytest.approx(6 * (393_216 + 0.4 * 1_064_960) * 1000)
    assert ltr == pytest.approx(6 * (393_216 + 1_064_960) * 1000)
    assert deep == pytest.approx(6 * (2 * 393_216 + 0.15 * 1_064_960) * 1000)
    tuned = m.cell("finetune/a/SST-2/lr0.0001/seed1").cost
    assert tuned == pytest.approx(6 * 393_216 * 5000 * 3 * 128 / 2)  # tiny's encoder, not mini's


def test_only_pulls_in_what_a_cell_needs(tmp_path):
    m = load_matrix(_write(tmp_path, MINIMAL))
    chosen = [c.name for c in select(m, "finetune/a/*/seed2")]
    assert chosen == ["vocab", "prepare", "pretrain/a", "finetune/a/SST-2/lr0.0001/seed1",
                      "finetune/a/SST-2/lr0.0003/seed1", "finetune/a/SST-2/seed2"]  # fmt: skip
    with pytest.raises(UserError, match="matches no cell"):
        select(m, "nothing-like-this")


def test_finished_cells_are_skipped_and_missing_models_rebuilt(tmp_path):
    m = load_matrix(_write(tmp_path, MINIMAL))
    out = tmp_path / "out"
    done = {n: {"cell": n} for n in ("vocab", "prepare", "pretrain/a")}
    todo = [c.name for c in plan(m, m.cells, done, out)]
    # the fine-tuning cells are pending and need pretrain/a's model, absent on this "fresh machine": rebuild
    assert todo[:3] == ["vocab", "prepare", "pretrain/a"]
    for f in ("vocab/vocab.txt", "prepare/data/manifest.json", "pretrain/a/model/config.json"):
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        (out / f).write_text("{}")
    todo = [c.name for c in plan(m, m.cells, done, out)]
    assert "pretrain/a" not in todo and todo[0].startswith("finetune/")


def test_a_failing_cell_skips_what_needs_it_and_the_rest_runs(tmp_path, monkeypatch):
    from lab.experiment import cells as experiment_cells

    monkeypatch.setattr(experiment_cells, "run_cell", _failing_at("finetune/a/SST-2/lr0.0001/seed1"))
    res = tmp_path / "res"
    summary = run_matrix(_write(tmp_path, MINIMAL), out=tmp_path / "out", results=res, progress=False)
    assert summary["failed"]["finetune/a/SST-2/lr0.0001/seed1"] == "RuntimeError: boom"
    # the final seeds of model a need the failed grid cell: skipped, with the reason; model a+bilstm ran
    assert summary["failed"]["finetune/a/SST-2/seed2"].startswith("needs finetune/a/SST-2/lr0.0001/seed1")
    assert (
        "finetune/a+bilstm/SST-2/seed2" in summary["ran"]
        and "finetune/a/SST-2/lr0.0003/seed1" in summary["ran"]
    )
    assert not (res / "finetune__a__SST-2__seed1.json").exists()
    assert (res / "finetune__a_bilstm__SST-2__seed2.json").exists()


def test_the_cli_exits_1_when_a_cell_failed_and_still_prints_its_summary(tmp_path, monkeypatch, capsys):
    from lab.experiment import cells as experiment_cells

    monkeypatch.setattr(experiment_cells, "run_cell", _failing_at("finetune/a+bilstm/SST-2/seed2"))
    cfg, out, res = _write(tmp_path, MINIMAL), tmp_path / "out", tmp_path / "res"
    args = ["experiment", str(cfg), "--out", str(out), "--results", str(res), "--quiet"]
    assert lab_main(args) == 1
    summary = _printed_summary(capsys.readouterr().out)
    assert list(summary["failed"]) == ["finetune/a+bilstm/SST-2/seed2"]
    assert (res / "finetune__a__SST-2__seed2.json").exists()  # the rest ran and wrote its results
    monkeypatch.setattr(experiment_cells, "run_cell", _scores_fifty)
    assert lab_main(args) == 0  # run again: the failed cell finishes
    assert _printed_summary(capsys.readouterr().out)["ran"] == ["finetune/a+bilstm/SST-2/seed2"]


def test_a_cell_stopped_by_a_signal_stops_the_runner_and_says_where_it_resumes(tmp_path, monkeypatch, capsys):
    """SIGTERM during a cell's training (bertkit.train.stop): the runner does not take it for a failed cell
    and go on to the next one; it releases the cell's lock, says where the checkpoint is and exits 143."""
    import signal

    from bertkit.train.stop import TrainingStopped
    from lab.experiment import cells as experiment_cells

    def stopped_at(matrix, cell, out, done, info, progress=True) -> dict:
        if cell.name == "pretrain/a":
            raise TrainingStopped(signal.SIGTERM, 7, out / "pretrain/a/checkpoints/step-00000007.pt")
        return _scores_fifty(matrix, cell, out, done, info, progress)

    monkeypatch.setattr(experiment_cells, "run_cell", stopped_at)
    cfg, out, res = _write(tmp_path, MINIMAL), tmp_path / "out", tmp_path / "res"
    assert lab_main(["experiment", str(cfg), "--out", str(out), "--results", str(res), "--quiet"]) == 143
    checkpoint = out / "pretrain/a/checkpoints/step-00000007.pt"
    assert (
        f"python -m lab experiment: stopped by SIGTERM after step 7; its checkpoint is {checkpoint}; run the same "
        "command to continue" in capsys.readouterr().err
    )
    assert (out / "locks").is_dir() and not any((out / "locks").glob("*.lock"))  # free for the next sitting
    assert not (res / "pretrain__a.json").exists() and not any(
        res.glob("finetune__*")
    )  # nothing ran after it


def _failing_at(name: str):
    """A fake ``run_cell`` that fails the cell ``name`` and scores every other one as :func:`_scores_fifty`."""

    def run_cell(matrix, cell, out, done, info, progress=True) -> dict:
        if cell.name == name:
            raise RuntimeError("boom")
        return _scores_fifty(matrix, cell, out, done, info, progress)

    return run_cell


def _printed_summary(stdout: str) -> dict:
    """The JSON summary the CLI prints last, after the runner's progress lines."""
    return json.loads(stdout[stdout.index("\n{\n") + 1 :])


def _scores_fifty(matrix, cell, out, done, info, progress=True) -> dict:
    """A fake ``run_cell``: every cell scores 50 at the rate and seed its spec gives."""
    return {"primary": 50.0, "hyperparameters": {"lr": cell.spec.get("lr")}, "seed": cell.spec.get("seed")}


def test_progress_counts_only_this_matrixs_finished_cells(tmp_path, monkeypatch, capsys):
    """A results folder shared with a runner of a longer config holds results of cells this config lacks:
    the progress line's "done X/Y in matrix" counts this matrix's cells only (X never above Y)."""
    from lab.experiment import cells as experiment_cells

    monkeypatch.setattr(experiment_cells, "run_cell", _scores_fifty)
    res = tmp_path / "res"
    res.mkdir()
    for i in range(50):  # another config's cells
        (res / f"finetune__other__SST-2__seed{i}.json").write_text(
            json.dumps({"cell": f"finetune/other/SST-2/seed{i}"})
        )
    run_matrix(_write(tmp_path, MINIMAL), out=tmp_path / "out", results=res, progress=False)
    lines = [x for x in capsys.readouterr().out.splitlines() if "in matrix" in x]
    counts = [re.search(r"done (\d+)/(\d+) in matrix", x).groups() for x in lines]
    assert counts[0][0] == "0" and all(int(a) < int(b) for a, b in counts)
    assert [int(a) for a, _ in counts] == sorted(int(a) for a, _ in counts)


def test_cells_whose_settings_changed_are_refused_then_rerun_on_request(tmp_path, monkeypatch):
    """A finished cell records a fingerprint of its settings and its inputs'. After an edit to the config a
    runner refuses to mix old and new results (one-line error naming the cells); --rerun-changed runs the
    changed cells and everything downstream again, keeping the old result files aside. Editing only which
    models a task runs for changes no finished cell."""
    from lab.experiment import cells as experiment_cells

    monkeypatch.setattr(experiment_cells, "run_cell", _scores_fifty)
    cfg, res, out = _write(tmp_path, MINIMAL), tmp_path / "res", tmp_path / "out"
    first = run_matrix(cfg, out=out, results=res, progress=False)
    assert not first["failed"] and all("settings" in r for r in read_results(res).values())
    cfg.write_text(MINIMAL.replace('kind = "glue"', 'kind = "glue"\nmodels = ["a", "a+bilstm"]'))
    assert run_matrix(cfg, out=out, results=res, dry_run=True)["changed"] == []
    cfg.write_text(MINIMAL.replace("tokens = 1000", "tokens = 2000"))  # pre-training changes: all downstream
    with pytest.raises(
        UserError, match=r"m.toml: 9 finished cell\(s\) ran with other settings .*: pretrain/a, "
    ):
        run_matrix(cfg, out=out, results=res, progress=False)
    again = run_matrix(cfg, out=out, results=res, progress=False, rerun_changed=True)
    assert sorted(again["ran"]) == sorted(again["changed"]) and "pretrain/a" in again["ran"]
    assert all(name.startswith(("pretrain/a", "finetune/")) for name in again["ran"])  # not the corpus cells
    assert (res / "replaced" / "pretrain__a.json").is_file()  # the old result kept, out of the report's way
    assert run_matrix(cfg, out=out, results=res, dry_run=True)["changed"] == []


def test_a_rebuild_says_whether_it_measured_the_same_and_what_read_it(tmp_path, monkeypatch, capsys):
    """A fresh machine has the result files but not the models. On another thread count a rebuilt model is not
    bitwise the one the kept results used: the rebuild writes its measurements beside the kept ones
    (RESULTS/rebuilt/), and every later result that reads it, in this sitting or a later one, names it.
    ``--rerun`` runs finished cells again (here: one grid on one model), keeping the old results aside."""
    import torch

    from lab.experiment import cells as experiment_cells
    from lab.experiment.paths import artifact

    pretrain_score = {"value": 50.0}

    def fake_run_cell(matrix, cell, out, done, info, progress=True):
        made = artifact(cell, out)  # what a later sitting on the same run folder finds, and does not rebuild
        if made is not None:
            made.parent.mkdir(parents=True, exist_ok=True)
            made.write_text("{}")
        primary = pretrain_score["value"] if cell.name == "pretrain/a" else 50.0
        # a timing in the metrics (as the vocabulary cell's) differs in every sitting: not a difference
        metrics = {"loss": primary / 10, "seconds": time.monotonic()}
        # a pre-training's own CPU clock, over all its sittings: another on each build
        costs = {"train_cpu_s": 7200.0 * primary / 50} if cell.kind == "pretrain" else {}
        return {"primary": primary, "metrics": metrics, "seed": cell.spec.get("seed"),
                "hyperparameters": {"lr": cell.spec.get("lr")}, **costs}  # fmt: skip

    monkeypatch.setattr(experiment_cells, "run_cell", fake_run_cell)
    thread_calls = []  # recorded, not applied: --threads must not change the later tests' thread count
    monkeypatch.setattr(torch, "set_num_threads", thread_calls.append)
    cfg, res = _write(tmp_path, MINIMAL), tmp_path / "res"
    run_matrix(cfg, out=tmp_path / "old", results=res, progress=False)
    with pytest.raises(UserError, match="--threads 0: give 1 or more"):
        run_matrix(cfg, out=tmp_path / "new", results=res, progress=False, threads=0)
    with pytest.raises(UserError, match="--rerun 'nothing' matches no finished cell"):
        run_matrix(cfg, out=tmp_path / "new", results=res, progress=False, rerun="nothing")
    assert not (res / "replaced").exists() and not (res / "rebuilt").exists()

    planned = run_matrix(cfg, out=tmp_path / "new", results=res, dry_run=True, rerun="finetune/a/*")
    assert planned["rerun"] and set(planned["rerun"]) <= set(planned["to_run"])  # planned, files untouched
    assert planned["rebuild"] == ["vocab", "prepare", "pretrain/a"]  # said before hours go into them
    assert not (res / "replaced").exists()
    pretrain_score["value"] = 50.5  # the fresh machine's model differs a little
    capsys.readouterr()
    summary = run_matrix(
        cfg, out=tmp_path / "new", results=res, progress=False, rerun="finetune/a/*", threads=1
    )
    assert sorted(summary["rerun"]) == sorted(n for n in summary["ran"] if n.startswith("finetune/a/"))
    assert (res / "replaced" / "finetune__a__SST-2__seed2.json").is_file()
    records = {r["cell"]: r for r in map(json.loads, map(Path.read_text, (res / "rebuilt").glob("*.json")))}
    assert sorted(records) == ["prepare", "pretrain/a", "vocab"]
    pre = records["pretrain/a"]
    assert pre["same_result"] is False and records["vocab"]["same_result"] is True
    assert (pre["kept"]["primary"], pre["rebuilt"]["primary"]) == (50.0, 50.5)
    # what each build cost is kept (the budget counts rebuilds), and is no difference in itself
    assert (pre["kept"]["train_cpu_s"], pre["rebuilt"]["train_cpu_s"]) == (7200.0, 7272.0)
    assert "cpu_s" in records["vocab"]["rebuilt"] and "train_cpu_s" not in records["vocab"]["rebuilt"]
    assert json.loads((res / "pretrain__a.json").read_text())["primary"] == 50.0  # the kept result stays
    assert (
        "pretrain/a rebuilt, NOT the same result (primary 50.0 -> 50.5; metrics {'loss': 5.0} -> {'loss': 5.05})"
        in capsys.readouterr().out
    )
    results = read_results(res)
    read_it = results["finetune/a/SST-2/seed2"]["rebuilt_inputs"]
    assert read_it["pretrain/a"]["same_result"] is False and read_it["vocab"]["same_result"] is True
    assert "rebuilt_inputs" not in results["finetune/a+bilstm/SST-2/seed2"]  # ran on the old model

    # a later sitting on the same run folder reads the same rebuilt model: it says so too
    again = run_matrix(cfg, out=tmp_path / "new", results=res, progress=False, rerun="finetune/a/SST-2/seed2")
    assert again["ran"] == ["finetune/a/SST-2/seed2"]
    assert "pretrain/a" in read_results(res)["finetune/a/SST-2/seed2"]["rebuilt_inputs"]
    first_build = read_results(res)["finetune/a/SST-2/seed2"]["rebuilt_inputs"]["pretrain/a"]["finished"]

    # the report says it, beside the commits and machines
    from lab.experiment.rebuilds import read_rebuilds
    from lab.report.front import rebuild_lines

    lines = {line.split("`")[1]: line for line in rebuild_lines(read_results(res), read_rebuilds(res))}
    assert sorted(lines) == ["prepare", "pretrain/a", "vocab"]
    kept_threads = json.loads((res / "pretrain__a.json").read_text())["threads"]
    assert (
        f"NOT the same result (primary 50.0 -> 50.5); kept: {kept_threads} thread(s)" in lines["pretrain/a"]
    )
    assert "; 4 result file(s) read the rebuild" in lines["pretrain/a"]
    assert (
        ", 2.00 CPU-hours; rebuilt: " in lines["pretrain/a"]
        and ", 2.02 CPU-hours; 4 result" in lines["pretrain/a"]
    )
    assert ": the same result, bitwise the same output; " in lines["vocab"]  # the same vocab.txt

    # yet another fresh machine rebuilds pretrain/a again for one cell: the rest of its grid follows it onto
    # the new build (test_a_grid_is_put_on_one_build_of_a_rebuilt_model), and each build counts its readers
    time.sleep(1)  # the builds are told apart by the second they finished
    newer = run_matrix(
        cfg, out=tmp_path / "newer", results=res, progress=False, rerun="finetune/a/SST-2/seed1"
    )
    assert len(newer["one_build"]) == 3
    # the cells the one-build rule queues count in the progress line's total, not past it
    counts = re.findall(r"\] cell (\d+)/(\d+) ", capsys.readouterr().out)
    assert counts[-1][0] == counts[-1][1] and all(int(k) <= int(n) for k, n in counts), counts
    builds = [line for line in rebuild_lines(read_results(res), read_rebuilds(res)) if "`pretrain/a`" in line]
    assert len(builds) == 2 and "; 0 result file(s) read the rebuild" in builds[0]
    assert "; 4 result file(s) read the rebuild" in builds[1]

    # results an older runner left on two builds of one grid: the report names the grid
    from lab.report.front import mixed_build_lines

    assert mixed_build_lines(load_matrix(cfg), read_results(res), read_rebuilds(res)) == []
    path = res / "finetune__a__SST-2__seed2.json"
    old_runner = json.loads(path.read_text())
    old_runner["rebuilt_inputs"]["pretrain/a"]["finished"] = first_build
    path.write_text(json.dumps(old_runner))
    mixed = mixed_build_lines(load_matrix(cfg), read_results(res), read_rebuilds(res))
    assert len(mixed) == 1 and "different builds of `pretrain/a`**: finetune/a/SST-2 (" in mixed[0]
    assert first_build in mixed[0] and "a+bilstm" not in mixed[0] and "--rerun" in mixed[0]


def test_report_names_a_model_whose_tasks_read_different_builds(tmp_path):
    """A model's CoNLL results on the build before a rebuild and its SQuAD results on the rebuild: each task's
    grid is whole, yet its row compares two pre-trainings. The report names the model and each task's build;
    a rebuild that measured the same, or one build for every task, gives no line."""
    from lab.report.front import mixed_build_lines

    m = load_matrix(_write(tmp_path, TWO_TASKS))
    rebuild = {"finished": "2026-11-26T21:21:21Z", "same_result": False}
    results = {c.name: {"cell": c.name} for c in m.cells if c.name.startswith("finetune/a/")}
    for name in results:
        if "/SQuAD/" in name:
            results[name]["rebuilt_inputs"] = {"pretrain/a": rebuild}
    record = {
        "cell": "pretrain/a",
        "compared": ["primary"],
        "kept": {"primary": 30.8},
        "rebuilt": {"primary": 31.1},
    }
    lines = mixed_build_lines(m, results, [record])
    assert lines == [
        "- `a`'s tasks read different builds of `pretrain/a` (each task on one build): SQuAD "
        "(2026-11-26T21:21:21Z), SST-2 (the first); its rows compare two pre-trainings across those tasks (the "
        "rebuild line above gives how far apart they measured)"
    ]
    assert mixed_build_lines(m, results, [{**record, "rebuilt": {"primary": 30.8}}]) == []  # the same model
    for r in results.values():
        r["rebuilt_inputs"] = {"pretrain/a": rebuild}
    assert mixed_build_lines(m, results, [record]) == []  # every task on the rebuild


def test_a_rebuild_compares_outputs_bit_for_bit_where_both_results_have_a_digest(tmp_path):
    """A finished cell with an output records its sha256 (weights, vocabulary, shards; not the configs and
    manifests, which hold paths): a later rebuild is then the same only if its output is the same, bit for bit.
    Results written before the digest existed are compared on their measurements alone."""
    from lab.experiment.paths import output_digest
    from lab.experiment.rebuilds import describe, record_rebuild

    m = load_matrix(_write(tmp_path, MINIMAL))
    pretrain = m.cell("pretrain/a")

    def model_in(folder: str, weights: bytes) -> Path:
        out = tmp_path / folder
        (out / "pretrain" / "a" / "model").mkdir(parents=True)
        (out / "pretrain" / "a" / "model" / "config.json").write_text(json.dumps({"written_in": str(out)}))
        (out / "pretrain" / "a" / "model" / "model.safetensors").write_bytes(weights)
        return out

    one, two, three = model_in("one", b"weights"), model_in("two", b"weights"), model_in("three", b"weightz")
    digests = [output_digest(pretrain, out) for out in (one, two, three)]
    assert digests[0] == digests[1] != digests[2] and None not in digests
    assert output_digest(m.cell("finetune/a/SST-2/seed2"), one) is None  # no output of its own
    info = {"commit": "c0ffee0", "cpu": "some CPU", "torch": "2.13.0"}
    kept = {
        "primary": 30.0,
        "output_sha256": digests[0],
        "threads": 1,
        "commit": "abc1234",
        "cpu": "some CPU",
    }

    def rebuild(folder: str, kept: dict, digest: str) -> dict:
        return record_rebuild(tmp_path / f"res-{folder}", tmp_path / folder, pretrain, kept,
                              {"primary": 30.0, "output_sha256": digest}, info, 2)  # fmt: skip

    same = rebuild("two", kept, digests[1])
    assert same["same_result"] and "bitwise the same output" in describe(same)
    other_weights = rebuild("three", kept, digests[2])  # the same score from other weights
    assert not other_weights["same_result"] and "NOT the same result" in describe(other_weights)
    older = rebuild("three", {k: v for k, v in kept.items() if k != "output_sha256"}, digests[2])
    assert older["same_result"] and "bitwise" not in describe(older)
    assert "the same measurements (its output's bits not compared" in describe(older)  # not "the same result"


def test_a_grid_is_put_on_one_build_of_a_rebuilt_model(tmp_path, monkeypatch):
    """A fresh machine rebuilds pretrain/a (not the same model) for model a's one pending SST-2 seed. The cells
    of that grid that read the first build run again, before the seed that takes their pick, so the pick and
    the spread come from one model; a+bilstm's grid, whole already, keeps its results. A second runner that
    arrives after the rebuild finds nothing more to move."""
    from lab.experiment import cells as experiment_cells

    build = {"n": 0}

    def fake_run_cell(matrix, cell, out, done, info, progress=True):
        if cell.name == "pretrain/a":
            build["n"] += 1
        return {"primary": 50.0 + build["n"] if cell.name == "pretrain/a" else 50.0,
                "seed": cell.spec.get("seed"), "hyperparameters": {"lr": cell.spec.get("lr")}}  # fmt: skip

    monkeypatch.setattr(experiment_cells, "run_cell", fake_run_cell)
    cfg, res = _write(tmp_path, MINIMAL), tmp_path / "res"
    run_matrix(cfg, out=tmp_path / "old", results=res, progress=False)
    (res / "finetune__a__SST-2__seed2.json").unlink()  # pending on the fresh machine
    before = read_results(res)
    assert run_matrix(cfg, out=tmp_path / "new", results=res, dry_run=True)["one_build"] == []  # no build yet

    summary = run_matrix(cfg, out=tmp_path / "new", results=res, progress=False)
    grid = ["finetune/a/SST-2/lr0.0001/seed1", "finetune/a/SST-2/lr0.0003/seed1", "finetune/a/SST-2/seed1"]
    assert summary["one_build"] == grid
    assert summary["ran"] == [*grid, "finetune/a/SST-2/seed2"]  # the grid before the seed that needs it
    after = read_results(res)
    builds = {after[n]["rebuilt_inputs"]["pretrain/a"]["finished"] for n in [*grid, "finetune/a/SST-2/seed2"]}
    assert len(builds) == 1
    assert all(after[n] == before[n] for n in before if n.startswith("finetune/a+bilstm/"))
    assert (res / "replaced" / "finetune__a__SST-2__seed1.json").is_file()
    again = run_matrix(cfg, out=tmp_path / "new", results=res, dry_run=True)
    assert again["one_build"] == [] and again["to_run"] == []


def test_cell_locks_keep_two_runners_off_one_cell(tmp_path):
    import os

    from lab.experiment.locks import claim_cell

    m = load_matrix(_write(tmp_path, MINIMAL))
    cell = m.cell("pretrain/a")
    first = claim_cell(tmp_path, cell)
    assert first is not None and first.read_text() == str(os.getpid())
    assert claim_cell(tmp_path, cell) is None  # held by a live process (this one)
    first.write_text("999999999")  # a process that is gone: its lock is taken over
    assert claim_cell(tmp_path, cell) == first and first.read_text() == str(os.getpid())
    first.write_text("")  # its writer is between creating it and writing its id: held
    assert claim_cell(tmp_path, cell) is None
    os.utime(first, (0, 0))  # ... or died there long ago: no one holds it (not process group 0)
    assert claim_cell(tmp_path, cell) == first and first.read_text() == str(os.getpid())


def test_a_stale_lock_another_runner_took_over_first_is_left_to_it(tmp_path, monkeypatch):
    """Two runners find one stale lock: the first deletes it and writes its own; the second, which saw the
    stale one, must not delete the new one (both would run the cell)."""
    import subprocess
    import sys

    from lab.experiment import locks

    cell = load_matrix(_write(tmp_path, MINIMAL)).cell("pretrain/a")
    lock = locks._lock_path(tmp_path, cell)
    lock.parent.mkdir(parents=True)
    lock.write_text("999999999")  # a process that is gone
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    holder, seen = locks._holder, []

    def other_runner_takes_it_meanwhile(path):
        seen.append(holder(path))
        if len(seen) == 1:  # this runner has found it stale: the other runner takes it over now
            path.unlink()
            path.write_text(str(other.pid))
        return seen[-1]

    monkeypatch.setattr(locks, "_holder", other_runner_takes_it_meanwhile)
    try:
        assert locks.claim_cell(tmp_path, cell) is None
        assert lock.read_text() == str(other.pid) and seen[:2] == [None, other.pid]
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("owner", ["a later process", "process 1"])
def test_a_lock_whose_process_id_was_reused_is_taken_over(tmp_path, owner):
    """A runner's lock outlived it and the system gave its process id to another live process: that process
    started after the lock was written, so it holds nothing and the lock is taken over (it blocked forever)."""
    import os
    import subprocess
    import sys

    from lab.experiment import locks

    cell = load_matrix(_write(tmp_path, MINIMAL)).cell("pretrain/a")
    lock = locks._lock_path(tmp_path, cell)
    lock.parent.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid = other.pid if owner == "a later process" else 1
        lock.write_text(str(pid))
        if owner == "a later process":  # written while it ran: it is the owner
            assert locks.claim_cell(tmp_path, cell) is None
        os.utime(lock, (0, 0))  # written before that process started (in 1970): by another one, now gone
        assert locks.claim_cell(tmp_path, cell) == lock and lock.read_text() == str(os.getpid())
    finally:
        other.kill()
        other.wait()


ONE_FEATURES = '[[task]]\nname = "NER"\nkind = "ner"\n[[features]]\nmodel = "a"\ntask = "NER"\n'


@pytest.mark.parametrize(
    "bad, match",
    [
        ('[[model]]\nname = "a"\nobjective = "mlm"\n', "duplicate model name"),
        ('[[model]]\nname = "b"\nfrom = "nope"\n', "must name a trained model"),
        ('[[model]]\nname = "b"\ncolour = 1\n', "unknown setting"),
        ('[[task]]\nname = "X"\nkind = "nope"\n', "kind must be one of"),
        ('[[model]]\nname = "b"\ntask_text = ["MNLI"]\n', "'MNLI' is not a \\[\\[task\\]\\]"),
        ('[[model]]\nname = "b"\ntask_text = "SST-2"\n', "task_text must be a list"),
        ('[[model]]\nname = "b"\nrandom = true\ntask_text = ["SST-2"]\n', "not one with `random`"),
        ('[[model]]\nname = "b"\npackage = "x"\ncontinue_from = "a"\n', "not one with `package`"),
        ('[[model]]\nname = "b"\nfrom = "a"\ntask_text = ["SST-2"]\n', "not one with `from`"),
        ('[[model]]\nname = "b"\ncontinue_from = "zz"\n', "must name another"),
        (
            '[[model]]\nname = "b"\ncontinue_from = "c"\n[[model]]\nname = "c"\n',
            "declare \\[\\[model\\]\\] 'c' before",
        ),
        ('[[model]]\nname = "b"\nfrom = "a"\ncontinue_from = "a"\n', "not one with `from`"),
        ('[[model]]\nname = "b"\ncontinue_from = "b"\n', "must name another"),
        (
            '[[model]]\nname = "r"\nrandom = true\n[[model]]\nname = "b"\ncontinue_from = "r"\n',
            "must be a model bertkit pre-trains here",
        ),
        (  # the weights fix the shape: an override of its own would be silently ignored in training
            '[[model]]\nname = "b"\ncontinue_from = "a"\nmodel = { num_hidden_layers = 4 }\n',
            r"model = \{'num_hidden_layers': 4\}: a model continued from 'a' has its shape \(model = None\)",
        ),
        # a string where a list goes was taken one character at a time (a pair: MINIMAL's text replaced)
        (("seeds = [1, 2]", 'seeds = "12"'), "m.toml: seeds = '12': must be a list of whole numbers"),
        (("seeds = [1, 2]", "seeds = 1"), "seeds = 1: must be a list of whole numbers"),
        (('corpus = ["c.txt"]', 'corpus = "corpus-large"'), "corpus = 'corpus-large': must be a list"),
        (("lr = [1e-4, 3e-4]", 'lr = "1e-4"'), "'SST-2': lr = '1e-4': must be a rate or a list of rates"),
        (("lr = [1e-4, 3e-4]", "lr = []"), "'SST-2': lr = \\[\\]: must be a rate or a list"),
        ('models = "a"\n', "'SST-2': models = 'a': must be a list of model names"),
        ('seeds = "3"\n', "'SST-2': seeds = '3': must be a list of whole numbers"),
        (
            ("seeds = [1, 2]", 'seeds = [1, 2]\nfinetune_models = "a"'),
            "finetune_models = 'a': must be a list",
        ),
        (ONE_FEATURES + 'variants = "last"\n', "\\[\\[features\\]\\] #1: variants = 'last': must be a list"),
        (
            ONE_FEATURES + 'seeds = "1"\nvariants = []\n',
            "\\[\\[features\\]\\] #1: seeds = '1': must be a list",
        ),
    ],
)
def test_bad_matrices_name_the_problem(tmp_path, bad, match):
    text = MINIMAL.replace(*bad) if isinstance(bad, tuple) else MINIMAL + bad
    assert text != MINIMAL
    with pytest.raises(UserError, match=match):
        load_matrix(_write(tmp_path, text))


NER_FEATURES = """
[[task]]
name = "NER"
kind = "ner"
[[task]]
name = "NER-full"
kind = "ner"
[[features]]
model = "a"
task = "NER"
variants = [{ name = "last", layers = [-1] }]
[[features]]
model = "a"
task = "NER-full"
"""


def test_a_second_features_entry_for_one_model_needs_its_own_name(tmp_path):
    with pytest.raises(UserError, match=r"\[\[features\]\] #2: name 'a' is taken"):
        load_matrix(
            _write(tmp_path, MINIMAL + NER_FEATURES + 'variants = [{ name = "last", layers = [-1] }]\n')
        )
    named = MINIMAL + NER_FEATURES + 'name = "a-full"\nvariants = [{ name = "last", layers = [-1] }]\n'
    cells = {c.name: c for c in load_matrix(_write(tmp_path, named)).cells if c.kind == "features"}
    # the first entry keeps the model's name (the result files of earlier runs stay valid), the second its own
    assert sorted(cells) == ["features/a-full/last/seed1", "features/a-full/last/seed2",
                             "features/a/last/seed1", "features/a/last/seed2"]  # fmt: skip
    assert cells["features/a-full/last/seed1"].spec["task"]["name"] == "NER-full"
    assert cells["features/a-full/last/seed1"].spec["model"] == "a"
    assert cells["features/a-full/last/seed1"].needs == ["pretrain/a"]


def test_cli_reports_a_bad_matrix_in_one_line(tmp_path, capsys):
    p = _write(tmp_path, MINIMAL + '[[task]]\nname = "X"\nkind = "nope"\n')
    assert lab_main(["experiment", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kind must be one of" in err[0]
    _write(tmp_path, MINIMAL.replace("seeds = [1, 2]", 'seeds = "12"'))
    assert lab_main(["experiment", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seeds = '12': must be a list of whole numbers" in err[0]


def test_cpu_clock_charges_only_training_steps(tmp_path, monkeypatch):
    from lab.experiment import pretrain_cells as ec

    now = iter([10.0, 12.0, 14.0])
    monkeypatch.setattr(ec.time, "process_time", lambda: next(now))
    clock = ec._CpuClock(tmp_path)
    for step in (10, 20, 30):  # 0.2 s per step between records
        clock({"step": step})
    assert clock.total() == pytest.approx(0.2 * 30)
    # a resumed sitting adds to what the file holds
    now2 = iter([100.0, 101.0])
    monkeypatch.setattr(ec.time, "process_time", lambda: next(now2))
    again = ec._CpuClock(tmp_path)
    again({"step": 40})
    again({"step": 50})
    assert again.total() == pytest.approx(6.0 + 0.1 * 20)


def test_smoke_matrix_end_to_end(shared_data, tmp_path):
    from bertkit.tuning import cpu_info

    cpu = cpu_info()
    out, res = tmp_path / "out", tmp_path / "res"
    summary = run_matrix(SMOKE, out=out, results=res, progress=False)
    matrix = load_matrix(SMOKE)
    results = read_results(res)
    assert set(results) == {c.name for c in matrix.cells} and summary["finished"] == len(matrix.cells)
    for r in results.values():
        for key in ("matrix", "cell", "kind", "commit", "cpu", "torch", "wall_s", "cpu_s", "threads"):
            assert key in r, (r["cell"], key)
        assert r["gemm_gflops_per_core"] > 0  # how fast a core of this host was: one measurement per sitting
        # which generation of the CPU (hosts share model names), its ISA, and the kernels bertkit chose there
        assert r["cpu_generation"] == cpu["family_model_stepping"] and set(r["isa"]) <= set(cpu["flags"]), r
        assert isinstance(r["kernel_choices"], dict)
    assert any(r["kernel_choices"] for r in results.values())  # the model's first use chose its kernels
    assert len({r["gemm_gflops_per_core"] for r in results.values()}) == 1
    pre = results["pretrain/mlm+nsp-tiny"]
    assert pre["tokens"] == pre["steps"] * 16 * 64 and pre["curve"] and 0 <= pre["primary"] <= 100
    assert pre["metrics"]["mlm_perplexity"] > 1
    # same CPU seconds for transformers' pipeline as bertkit's training steps took
    hf = results["pretrain/transformers-mlm-tiny"]
    assert hf["cpu_budget_s"] == pre["train_cpu_s"] and hf["tokens"] > 0
    # the LTR model keeps its causal mask at fine-tuning time; the derived model adds a BiLSTM
    assert json.loads((out / "pretrain/ltr-tiny/model/config.json").read_text())["causal"] is True
    # a left-to-right model gets its held-out next-token scores, not masked-LM ones it cannot be given
    ltr = results["pretrain/ltr-tiny"]
    assert set(ltr["metrics"]) == {"next_token_loss", "next_token_accuracy", "sequences"}
    assert ltr["primary"] == round(100 * ltr["metrics"]["next_token_accuracy"], 2)
    view = json.loads((out / "models/ltr+bilstm-tiny/config.json").read_text())
    assert view["causal"] is True and view["head_bilstm"] is True
    # every seed uses the grid's best rate; the first seed is the grid run itself
    s1, s2 = results["finetune/mlm+nsp-tiny/SST-2/seed1"], results["finetune/mlm+nsp-tiny/SST-2/seed2"]
    best = max(s1["grid"], key=lambda k: s1["grid"][k])
    assert s1["hyperparameters"]["lr"] == s2["hyperparameters"]["lr"] == float(best)
    assert s1["from_cell"].startswith("finetune/mlm+nsp-tiny/SST-2/lr")
    # what each run predicted on dev, kept after its folder is removed; a reused rate cell keeps its digest
    assert s1["predictions_sha256"] == results[s1["from_cell"]]["predictions_sha256"]
    assert re.fullmatch(
        r"[0-9a-f]{64}", results["finetune/ltr+bilstm-tiny/SQuAD-v1.1/seed1"]["predictions_sha256"]
    )
    assert results["finetune/ltr+bilstm-tiny/SQuAD-v1.1/seed1"]["metrics"]["f1"] >= 0
    assert results["features/mlm+nsp-tiny/all-layers-weighted-sum/seed1"]["hyperparameters"]["layers"] == [
        0,
        1,
        2,
    ]

    # task text: only the tasks' training splits, first in the model's own shards; held out is the corpus's
    text = (out / "tasktext/mlm-tiny-tasktext/task-text.txt").read_text(encoding="utf-8")
    lines = set(text.splitlines())
    assert results["tasktext/mlm-tiny-tasktext"]["metrics"]["documents"] > 100
    from bertkit.data.shards import ShardSet
    from bertkit.tasks.glue import glue_task_data
    from bertkit.tasks.squad import load_squad_json

    sst2 = glue_task_data("SST-2", shared_data / "glue/SST-2")
    assert " ".join(sst2.train[0].text_a.split()) in lines
    assert not lines & {" ".join(e.text_a.split()) for e in sst2.dev if len(e.text_a.split()) > 8}
    squad = load_squad_json(shared_data / "squad/dev-v1.1.json")["data"]
    assert squad[0]["paragraphs"][0]["qas"][0]["question"].strip() in lines  # the train article
    assert squad[-1]["paragraphs"][0]["qas"][0]["question"].strip() not in lines  # the dev article
    base, own = ShardSet(out / "prepare/data"), ShardSet(out / "prepare-task-text/mlm-tiny-tasktext/data")
    assert own.documents > base.documents
    for k in range(1, 21):  # the last valid_documents (20) documents: the same held-out split
        assert all(
            (a == b).all() for a, b in zip(base.document(base.documents - k), own.document(own.documents - k))
        )
    # a continued model starts from the other's weights and says so; its tokens are its own steps'
    more = results["pretrain/mlm+nsp-tiny-continued"]
    assert more["continued_from"] == "mlm+nsp-tiny" and more["tokens_before"] == pre["tokens"]
    assert more["tokens"] == 4096
    run_cfg = json.loads((out / "pretrain/mlm+nsp-tiny-continued/run_config.json").read_text())
    assert run_cfg["init_from"] == str(out / "pretrain/mlm+nsp-tiny/model")
    assert matrix.cell("pretrain/mlm+nsp-tiny-continued").needs == [
        "prepare/mlm+nsp-tiny-continued",
        "pretrain/mlm+nsp-tiny",
    ]
    held, base_held = results["pretrain/mlm-tiny-tasktext"]["metrics"], pre["metrics"]
    for key in ("masked_tokens", "unigram_loss", "unigram_accuracy"):  # scored on the same blanks
        assert held[key] == base_held[key], key

    # a second run finds everything done; a deleted result re-runs that cell only (its model is still there)
    assert run_matrix(SMOKE, out=out, results=res, progress=False)["to_run"] == []
    (res / "finetune__ltr-tiny__SST-2__seed2.json").unlink()
    again = run_matrix(SMOKE, out=out, results=res, progress=False)
    assert again["ran"] == ["finetune/ltr-tiny/SST-2/seed2"]
    # a fresh machine: the pre-trained model is gone, so a pending cell that needs it rebuilds it first
    shutil.rmtree(out / "pretrain/ltr-tiny")
    (res / "finetune__ltr-tiny__SST-2__seed2.json").unlink()
    plan_only = run_matrix(SMOKE, out=out, results=res, dry_run=True)
    assert plan_only["to_run"] == ["pretrain/ltr-tiny", "finetune/ltr-tiny/SST-2/seed2"]
    # ... and on the same threads the rebuild is the same model, bit for bit: nothing else needs to run again
    rebuilt = run_matrix(SMOKE, out=out, results=res, progress=False)
    assert rebuilt["ran"] == ["finetune/ltr-tiny/SST-2/seed2"] and rebuilt["one_build"] == []
    (record,) = [json.loads(p.read_text()) for p in (res / "rebuilt").glob("pretrain__ltr-tiny__*.json")]
    assert record["same_result"] and "output_sha256" in record["compared"]
    seed2 = json.loads((res / "finetune__ltr-tiny__SST-2__seed2.json").read_text())
    assert seed2["rebuilt_inputs"]["pretrain/ltr-tiny"]["same_result"] is True


def _finished_elsewhere(matrix, res: Path, prefix: str) -> None:
    """Result files for every cell whose name starts with ``prefix``, as another runner would write them."""
    for c in matrix.cells:
        if c.name.startswith(prefix):
            (res / c.result_name).write_text(json.dumps({"cell": c.name, "kind": c.kind, "primary": 1.0}))


@pytest.mark.parametrize("finished_during", ["vocab", "pretrain/a"])
def test_cells_another_runner_finishes_are_not_run_again(tmp_path, monkeypatch, finished_during):
    """A fresh machine: vocab, prepare and pretrain/a have results but no outputs, so they are planned as
    rebuilds for the pending fine-tuning cells. Another runner finishes every fine-tuning cell meanwhile: this
    runner must then neither run those cells (they are not rebuilds) nor rebuild inputs nobody reads any more."""
    from lab.experiment import cells as experiment_cells

    cfg = _write(tmp_path, MINIMAL)
    m = load_matrix(cfg)
    res = tmp_path / "res"
    res.mkdir()
    _finished_elsewhere(m, res, "vocab")
    _finished_elsewhere(m, res, "prepare")
    _finished_elsewhere(m, res, "pretrain/")
    calls = []

    def fake_run_cell(matrix, cell, out, done, info, progress=True):
        calls.append(cell.name)
        if cell.name == finished_during:
            _finished_elsewhere(matrix, res, "finetune/")
        return {"primary": 2.0, "seed": cell.spec.get("seed")}

    monkeypatch.setattr(experiment_cells, "run_cell", fake_run_cell)
    summary = run_matrix(cfg, out=tmp_path / "out", results=res, progress=False)
    ran_until_then = {"vocab": ["vocab"], "pretrain/a": ["vocab", "prepare", "pretrain/a"]}
    assert calls == ran_until_then[finished_during]
    assert summary["ran"] == [] and summary["failed"] == {}
    assert all(json.loads(f.read_text())["primary"] == 1.0 for f in res.glob("*.json"))  # nothing overwritten
    assert not list((tmp_path / "out" / "locks").glob("*.lock"))


@pytest.mark.parametrize(
    "other_runner",
    ["finishes", "is killed", "rebuilds", "is killed rebuilding", "rebuilds, its model half written"],
)
def test_cells_that_need_another_runners_cell_wait_for_it(tmp_path, monkeypatch, other_runner):
    """A second runner finds pretrain/a locked by a live runner: it runs what it can, then waits for that
    cell instead of failing the fine-tuning cells that need it. If the other runner dies without a result,
    this one takes the cell over. A rebuild (a fresh machine: the result file is there, the model is not) is
    over when its lock is let go, not when its result file exists: it existed all along."""
    import subprocess
    import sys
    import threading

    from lab.experiment import cells as experiment_cells
    from lab.experiment import locks

    monkeypatch.setattr(locks, "POLL_OTHER_RUNNERS_S", 0.05)
    cfg = _write(tmp_path, MINIMAL)
    m = load_matrix(cfg)
    res, out = tmp_path / "res", tmp_path / "out"
    res.mkdir()
    rebuilding = "rebuild" in other_runner
    if rebuilding:  # the corpus cells' outputs are here, pretrain/a's model is not
        for name, output in (("vocab", "vocab/vocab.txt"), ("prepare", "prepare/data/manifest.json")):
            _finished_elsewhere(m, res, name)
            (out / output).parent.mkdir(parents=True)
            (out / output).write_text("{}")
        _finished_elsewhere(m, res, "pretrain/a")
    if "half written" in other_runner:  # the model's config is there before its weights: not finished yet
        (out / "pretrain" / "a" / "model").mkdir(parents=True)
        (out / "pretrain" / "a" / "model" / "config.json").write_text("{}")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lock = locks._lock_path(out, m.cell("pretrain/a"))
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(str(other.pid))
    calls, other_over = [], threading.Event()

    def other_runner_ends():
        if rebuilding:  # nothing to run meanwhile: give this runner time to (wrongly) go ahead
            time.sleep(0.5)
        else:
            while "prepare" not in calls:  # this runner got past the locked cell to what it could do
                time.sleep(0.01)
        if other_runner == "finishes":
            _finished_elsewhere(m, res, "pretrain/a")
        if other_runner in ("finishes", "rebuilds"):
            (out / "pretrain" / "a" / "model").mkdir(parents=True)
            (out / "pretrain" / "a" / "model" / "config.json").write_text("{}")
        other_over.set()
        other.kill()
        other.wait()

    def fake_run_cell(matrix, cell, out_, done, info, progress=True):
        calls.append(cell.name)
        if cell.name.startswith("finetune/"):
            assert other_over.is_set(), f"{cell.name} ran before the model it reads was there"
        return {"primary": 2.0, "seed": cell.spec.get("seed")}

    monkeypatch.setattr(experiment_cells, "run_cell", fake_run_cell)
    ender = threading.Thread(target=other_runner_ends)
    ender.start()
    try:
        summary = run_matrix(cfg, out=out, results=res, progress=False)
    finally:
        ender.join()
        other.kill()
    assert summary["failed"] == {} and summary["left_to_other_runners"] == []
    took_over = "is killed" in other_runner
    assert ("pretrain/a" in calls) == took_over
    if not rebuilding:
        assert calls.index("prepare") < min(calls.index(c) for c in calls if c.startswith("finetune/"))
    assert {c.name for c in m.cells if c.name.startswith("finetune/")} <= set(calls)


# --- rates beyond the grid's edges (`lr_extend`, lab/experiment/grid.py) ---

EXTENDED = MINIMAL.replace("lr = [1e-4, 3e-4]", "lr = [1e-4, 3e-4]\nlr_extend = [1e-5, 3e-5, 1e-3, 3e-3]")


def _scored_by_rate(score_of):
    """A fake ``run_cell`` that settles a fine-tuning cell's rate with the real grid code and scores it
    ``score_of(lr)`` (a training run stands in by a function of its rate)."""
    from lab.experiment.grid import settle_rate

    def fake_run_cell(matrix, cell, out, done, info, progress=True):
        if cell.kind != "finetune":
            return {"primary": None}
        rate = settle_rate(cell, done)
        if "skipped" in rate:
            return {"skipped": rate["skipped"], "primary": None, "hyperparameters": {"lr": rate["lr"]}}
        return {"primary": score_of(rate["lr"]), "hyperparameters": {"lr": rate["lr"]},
                "seed": cell.spec["seed"], **({"from_cell": rate["from_cell"]} if "from_cell" in rate else {})}  # fmt: skip

    return fake_run_cell


def test_lr_extend_adds_rates_beyond_each_edge_nearest_first(tmp_path):
    m = load_matrix(_write(tmp_path, EXTENDED))
    up = m.cell("finetune/a/SST-2/lr0.003/seed1")
    assert up.spec["extends"] == "above" and up.needs == [
        "pretrain/a",
        "finetune/a/SST-2/lr0.0001/seed1",
        "finetune/a/SST-2/lr0.0003/seed1",
        "finetune/a/SST-2/lr0.001/seed1",
    ]
    assert m.cell("finetune/a/SST-2/lr1e-05/seed1").spec["decided_by"][-1] == "finetune/a/SST-2/lr3e-05/seed1"
    seed = m.cell("finetune/a/SST-2/seed2")
    assert seed.after == [f"finetune/a/SST-2/lr{x}/seed1" for x in ("3e-05", "1e-05", "0.001", "0.003")]
    names = [c.name for c in m.cells]
    assert all(names.index(n) < names.index(seed.name) for n in seed.after)


def test_lr_extend_leaves_finished_cells_fingerprints_alone(tmp_path):
    from lab.experiment.results import cell_settings

    before = cell_settings(load_matrix(_write(tmp_path, MINIMAL)))
    after = cell_settings(load_matrix(_write(tmp_path, EXTENDED)))
    assert all(after[name] == fp for name, fp in before.items())
    assert set(after) - set(before) == {
        f"finetune/{m}/SST-2/lr{x}/seed1"
        for m in ("a", "a+bilstm")
        for x in ("1e-05", "3e-05", "0.001", "0.003")
    }


@pytest.mark.parametrize(
    "extend, match",
    [
        ("[2e-4]", r"each rate must lie outside the grid \(0.0001 to 0.0003\)"),
        ("[1e-3, 1e-3]", "appear once"),
        ('["hot"]', "must be a list of positive learning rates"),
    ],
)
def test_bad_lr_extend_is_refused(tmp_path, extend, match):
    with pytest.raises(UserError, match=match):
        load_matrix(
            _write(tmp_path, MINIMAL.replace("lr = [1e-4, 3e-4]", f"lr = [1e-4, 3e-4]\nlr_extend = {extend}"))
        )
    with pytest.raises(UserError, match="lr_extend needs a grid"):
        load_matrix(_write(tmp_path, MINIMAL.replace("lr = [1e-4, 3e-4]", "lr = 1e-4\nlr_extend = [1e-3]")))


@pytest.mark.parametrize(
    "score_of, runs, picked",
    [  # rising with the rate: both rates above run, the pick is the last; none below
        (lambda lr: 1000 * lr, {"0.001", "0.003"}, 3e-3),
        # best one step above: the next one out runs and loses, the pick stays
        (lambda lr: -abs(lr - 1e-3), {"0.001", "0.003"}, 1e-3),
        # best on the grid's lower edge: the rate below runs and loses; nothing above runs
        (lambda lr: -abs(lr - 1e-4), {"3e-05"}, 1e-4),
        # falling with the rate: both rates below run
        (lambda lr: -lr, {"3e-05", "1e-05"}, 1e-5),
    ],
)
def test_grid_extends_while_the_pick_lies_on_an_edge(tmp_path, monkeypatch, score_of, runs, picked):
    from lab.experiment import cells as experiment_cells

    monkeypatch.setattr(experiment_cells, "run_cell", _scored_by_rate(score_of))
    res = tmp_path / "res"
    run_matrix(_write(tmp_path, EXTENDED), out=tmp_path / "out", results=res, progress=False)
    done = read_results(res)
    ext = {
        x
        for x in ("1e-05", "3e-05", "0.001", "0.003")
        if not done[f"finetune/a/SST-2/lr{x}/seed1"].get("skipped")
    }
    assert ext == runs
    skipped = (
        done["finetune/a/SST-2/lr0.003/seed1"].get("skipped")
        or done["finetune/a/SST-2/lr1e-05/seed1"]["skipped"]
    )
    assert skipped.startswith("the pick on dev, lr ")
    for seed in (1, 2):
        assert done[f"finetune/a/SST-2/seed{seed}"]["hyperparameters"]["lr"] == picked
    assert "lr" in str(done["finetune/a/SST-2/seed1"].get("from_cell"))  # the first seed reuses its rate cell


def test_seed_cells_run_again_when_an_extension_moves_the_pick(tmp_path, monkeypatch):
    """A matrix that finished without ``lr_extend`` keeps every result when the key is added (no changed
    fingerprint); the extensions then run, and the seed cells whose pick they moved run again at the new
    rate, their old result files kept under ``replaced/``. A pick they did not move keeps its seed cells."""
    from lab.experiment import cells as experiment_cells

    score = {"a": lambda lr: 1000 * lr, "a+bilstm": lambda lr: -abs(lr - 1e-4)}

    def fake(matrix, cell, out, done, info, progress=True):
        if cell.kind != "finetune":
            return {"primary": None}
        return _scored_by_rate(score[cell.spec["model"]])(matrix, cell, out, done, info, progress)

    monkeypatch.setattr(experiment_cells, "run_cell", fake)
    cfg, res, out = _write(tmp_path, MINIMAL), tmp_path / "res", tmp_path / "out"
    run_matrix(cfg, out=out, results=res, progress=False)
    assert read_results(res)["finetune/a/SST-2/seed2"]["hyperparameters"]["lr"] == 3e-4
    cfg.write_text(EXTENDED)
    assert run_matrix(cfg, out=out, results=res, dry_run=True)["changed"] == []
    again = run_matrix(cfg, out=out, results=res, progress=False)
    assert {"finetune/a/SST-2/seed1", "finetune/a/SST-2/seed2"} <= set(again["ran"])
    assert not any(n.startswith("finetune/a+bilstm/SST-2/seed") for n in again["ran"])
    done = read_results(res)
    assert [done[f"finetune/a/SST-2/seed{s}"]["hyperparameters"]["lr"] for s in (1, 2)] == [3e-3, 3e-3]
    assert done["finetune/a/SST-2/seed1"]["from_cell"] == "finetune/a/SST-2/lr0.003/seed1"
    assert (res / "replaced" / "finetune__a__SST-2__seed2.json").is_file()
    assert run_matrix(cfg, out=out, results=res, dry_run=True)["to_run"] == []


def test_a_pick_inside_the_grid_runs_no_extension(tmp_path, monkeypatch):
    from lab.experiment import cells as experiment_cells

    monkeypatch.setattr(experiment_cells, "run_cell", _scored_by_rate(lambda lr: -abs(lr - 3e-4)))
    text = MINIMAL.replace("lr = [1e-4, 3e-4]", "lr = [1e-4, 3e-4, 1e-3]\nlr_extend = [3e-5, 3e-3]")
    res = tmp_path / "res"
    run_matrix(_write(tmp_path, text), out=tmp_path / "out", results=res, progress=False)
    done = read_results(res)
    for x in ("3e-05", "0.003"):
        assert done[f"finetune/a/SST-2/lr{x}/seed1"]["skipped"] == (
            "the pick on dev, lr 0.0003, lies inside the rates run (0.0001 / 0.0003 / 0.001)"
        )
    assert done["finetune/a/SST-2/seed2"]["hyperparameters"]["lr"] == 3e-4


def test_eta_weighs_a_grid_extension_by_the_chance_it_runs(tmp_path):
    from lab.experiment.runner import _seconds_left, _share_run

    m = load_matrix(_write(tmp_path, EXTENDED))
    up, seed = m.cell("finetune/a/SST-2/lr0.001/seed1"), m.cell("finetune/a/SST-2/seed2")

    def grid(scores):
        return {f"finetune/a/SST-2/lr{lr:g}/seed1": {"primary": x, "seed": 1, "hyperparameters": {"lr": lr}}
                for lr, x in scores.items()}  # fmt: skip

    assert _share_run(seed, {}) == 1.0 and _share_run(up, {}) == 0.5  # its grid not finished: undecided
    assert _share_run(up, grid({1e-4: 50.0, 3e-4: 60.0})) == 1.0  # the pick on the top edge: it runs
    assert _share_run(up, grid({1e-4: 60.0, 3e-4: 50.0})) == 0.0  # the pick on the other edge: it does not
    timed = [("finetune", 10.0, up.cost)]  # 10 s for one such cell
    assert _seconds_left([up, seed], timed, {}) == pytest.approx(10.0 * 0.5 + 10.0 * seed.cost / up.cost)


def test_eta_times_a_fine_tuning_cell_by_finished_cells_of_its_own_task(tmp_path):
    """Seconds per estimated FLOP differ some 70 times between tasks (SQuAD's strided features and span
    decoding are not in the estimate): a task's cells are timed by that task's finished cells, and by the
    kind's only where none of the task has finished."""
    from lab.experiment.runner import _seconds_left, _work_kind

    m = load_matrix(_write(tmp_path, TWO_TASKS))
    sst, qa = m.cell("finetune/a/SST-2/seed2"), m.cell("finetune/a/SQuAD/seed2")
    result_of = {"kind": "finetune", "task": "SQuAD"}  # a result names its task; a cell's spec holds it
    assert _work_kind("finetune", qa.spec) == _work_kind("finetune", result_of) == "finetune/SQuAD"
    assert _work_kind("pretrain", m.cell("pretrain/a").spec) == "pretrain"
    timed = [("finetune/SST-2", 1.0, sst.cost), ("finetune/SQuAD", 70.0, qa.cost)]
    assert _seconds_left([sst], timed, {}) == pytest.approx(1.0)
    assert _seconds_left([qa], timed, {}) == pytest.approx(70.0)  # the old pooled rate said 35.5
    only_sst = timed[:1]  # no SQuAD cell finished yet: the fine-tuning rate stands in
    assert _seconds_left([qa], only_sst, {}) == pytest.approx(qa.cost / sst.cost)


def test_eta_scales_earlier_sittings_rates_by_this_sittings_speed(tmp_path):
    """A sitting on a slower host (or beside a second runner) takes longer for everything: once it has
    finished a cell, work it has not timed yet is the earlier sittings' rate times how much slower it ran."""
    from lab.experiment.runner import _seconds_left

    m = load_matrix(_write(tmp_path, TWO_TASKS))
    sst, qa = m.cell("finetune/a/SST-2/seed2"), m.cell("finetune/a/SQuAD/seed2")
    earlier = [("finetune/SST-2", 1.0, sst.cost), ("finetune/SQuAD", 70.0, qa.cost)]
    assert _seconds_left([qa], earlier, {}, here=[]) == pytest.approx(70.0)
    slower = [("finetune/SST-2", 2.5, sst.cost)]  # this sitting ran SST-2 2.5 times slower
    assert _seconds_left([qa], earlier, {}, here=slower) == pytest.approx(175.0)
    assert _seconds_left([sst], earlier, {}, here=slower) == pytest.approx(2.5)  # its own rate
    mine = [*slower, ("finetune/SQuAD", 100.0, qa.cost)]  # its own SQuAD timing wins over the scaled one
    assert _seconds_left([qa], earlier, {}, here=mine) == pytest.approx(100.0)
    new_work = [("pretrain", 10.0, sst.cost)]  # nothing earlier to compare with: this sitting's rates alone
    assert _seconds_left([qa], [], {}, here=new_work) == pytest.approx(10.0 * qa.cost / sst.cost)


def test_a_pick_moved_by_another_sitting_reruns_its_seed_cells_at_the_start(tmp_path, monkeypatch):
    """Extensions finished elsewhere (another runner, an earlier sitting) after a seed cell ran: the next
    sitting finds the seed cell stale before it plans, moves its file aside and runs it at the new pick. A
    file another runner moved first is no error."""
    from lab.experiment import cells as experiment_cells
    from lab.experiment.runner import _replace

    monkeypatch.setattr(experiment_cells, "run_cell", _scored_by_rate(lambda lr: 1000 * lr))
    cfg, res, out = _write(tmp_path, EXTENDED), tmp_path / "res", tmp_path / "out"
    run_matrix(cfg, out=out, results=res, progress=False)
    seed2 = res / "finetune__a__SST-2__seed2.json"
    stale = json.loads(seed2.read_text())
    stale["hyperparameters"]["lr"] = 3e-4  # as if it had run before the extensions
    seed2.write_text(json.dumps(stale))
    assert run_matrix(cfg, out=out, results=res, dry_run=True)["pick_moved"] == ["finetune/a/SST-2/seed2"]
    assert seed2.is_file()  # a dry run moves nothing
    again = run_matrix(cfg, out=out, results=res, progress=False)
    assert again["ran"] == ["finetune/a/SST-2/seed2"]
    assert read_results(res)["finetune/a/SST-2/seed2"]["hyperparameters"]["lr"] == 3e-3
    assert (res / "replaced" / seed2.name).is_file()
    (res / "finetune__a__SST-2__seed1.json").unlink()  # as if another runner had moved it first
    done = read_results(res)
    _replace(load_matrix(cfg), ["finetune/a/SST-2/seed1"], res, done)
    assert "finetune/a/SST-2/seed1" not in done


def test_repro_check_reruns_finished_cells_on_a_copy_and_compares(tmp_path, monkeypatch):
    """`benchmarks.repro_check` runs finished cells again into a copy of the results (the committed files stay
    as they were) and reports each cell's committed and new score, whether they are equal, and the seeds'
    spread of its model and task."""
    from benchmarks.repro_check import check
    from lab.experiment import cells as experiment_cells

    config = _write(tmp_path, MINIMAL)
    res = tmp_path / "results" / "t"  # the config's own results folder
    monkeypatch.setattr(experiment_cells, "run_cell", _scores_fifty)
    run_matrix(config, out=tmp_path / "out", progress=False)
    seed2 = res / load_matrix(config).cell("finetune/a/SST-2/seed2").result_name
    committed = json.loads(seed2.read_text())
    committed["primary"] = 52.0  # as if another host had scored it so
    seed2.write_text(json.dumps(committed))

    out = check(str(config), "finetune/a/SST-2/seed2", str(tmp_path / "out"))
    (row,) = out["cells"]
    assert row["cell"] == "finetune/a/SST-2/seed2" and row["committed"]["primary"] == 52.0
    assert row["now"]["primary"] == 50.0 and row["same_score"] is False and row["score_change"] == -2.0
    assert row["seeds_std"] == pytest.approx(1.414, abs=1e-3)  # seeds 1 and 2: 50 and 52
    assert json.loads(seed2.read_text())["primary"] == 52.0  # the committed file is untouched
    assert out["machine"]["commit"] and out["machine"]["gemm_gflops_per_core"] > 0


def test_a_continued_model_may_be_continued_again(tmp_path):
    """A chain of continuations (1, 2, 5 ... CPU-hours of one model): each link needs the one before it."""
    m = load_matrix(
        _write(
            tmp_path,
            MINIMAL
            + '[[model]]\nname = "b"\ncontinue_from = "a"\n[[model]]\nname = "c"\ncontinue_from = "b"\n',
        )
    )
    assert "pretrain/b" in m.cell("pretrain/c").needs and "pretrain/a" in m.cell("pretrain/b").needs


def test_a_model_config_file_is_found_beside_the_matrix_and_a_missing_one_is_named(tmp_path):
    """An arm of another architecture (a ModernBERT config.json) names its config relative to the matrix."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mb.json").write_text('{"model_type": "modernbert"}')
    m = load_matrix(_write(tmp_path, MINIMAL + '[[model]]\nname = "mb"\nmodel_config = "configs/mb.json"\n'))
    assert m.cell("pretrain/mb").spec["model_config"] == str(tmp_path / "configs" / "mb.json")
    with pytest.raises(UserError, match=r"model_config 'configs/none.json': .*none.json not found"):
        load_matrix(
            _write(tmp_path, MINIMAL + '[[model]]\nname = "mb"\nmodel_config = "configs/none.json"\n')
        )


def test_a_cells_settings_read_the_same_from_a_checkout_in_another_folder(tmp_path):
    """cell.json decides whether a killed pre-training run resumes: a config beside the matrix is named
    relative to it, so a worktree or a fresh clone elsewhere resumes instead of starting over."""
    from lab.experiment.pretrain_cells import run_settings

    text = MINIMAL + '[[model]]\nname = "mb"\nmodel_config = "configs/mb.json"\n'
    settings = []
    for checkout in ("one", "two"):
        (tmp_path / checkout / "configs").mkdir(parents=True)
        (tmp_path / checkout / "configs" / "mb.json").write_text('{"model_type": "modernbert"}')
        m = load_matrix(_write(tmp_path / checkout, text))
        settings.append(json.loads(run_settings(m.cell("pretrain/mb").spec, m.base)))
    assert settings[0] == settings[1] and settings[0]["model_config"] == "configs/mb.json"
    # a setting that changed still reads as changed, and a file outside the matrix's folder keeps its path
    changed = load_matrix(_write(tmp_path / "one", text.replace("tokens = 1000", "tokens = 2000")))
    assert run_settings(changed.cell("pretrain/mb").spec, changed.base) != json.dumps(
        settings[0], sort_keys=True
    )
    outside = {"model_config": str(tmp_path / "elsewhere.json")}
    assert json.loads(run_settings(outside, tmp_path / "one"))["model_config"] == str(
        tmp_path / "elsewhere.json"
    )


def test_the_study_matrix_has_a_modernbert_arm_of_bert_minis_size():
    """The budget study's ModernBERT arm: within 2% of BERT-mini's parameters, at the same token budget as the
    RoBERTa-recipe arm it is compared with (their CPU cost per token measured equal within 2%)."""
    from bertkit.config import BertConfig
    from bertkit.modernbert import ModernBertForMaskedLM
    from bertkit.modernbert_config import ModernBertConfig
    from bertkit.objectives import get_objective

    study = load_matrix(Path(__file__).resolve().parents[1] / "experiments" / "pretrain-study.toml")
    arm, roberta = study.cell("pretrain/modernbert-mini-3h").spec, study.cell("pretrain/roberta-mini-3h").spec
    assert arm["objective"] == roberta["objective"] == "roberta" and arm["tokens"] == roberta["tokens"]
    mb = ModernBertForMaskedLM(ModernBertConfig.from_json_file(arm["model_config"]))
    bert = get_objective("roberta", pad_token_id=0).build_model(BertConfig.preset("mini", vocab_size=30522))
    n_mb, n_bert = (sum(p.numel() for p in m.parameters()) for m in (mb, bert))
    assert abs(n_mb - n_bert) / n_bert < 0.02


def test_the_study_headline_chain_continues_the_electra_modernbert_arm_link_by_link():
    """The chain the four-GLUE-task rule picked: the ELECTRA-with-ModernBERT arm's recipe, each link continued
    from the one before in whole steps of 32 x 128 tokens, the first three one CPU-hour apart at the early
    estimate of the cost, the last two sized from the 5h link's measured cost to end near 10 and 20 CPU-hours
    (the last in bf16, so below 20), and the [curve] drawn through exactly these links."""
    study = load_matrix(Path(__file__).resolve().parents[1] / "experiments" / "pretrain-study.toml")
    arm = study.cell("pretrain/electra-modernbert-mini-3h").spec
    links = study.raw["curve"]["models"]
    specs = [study.cell(f"pretrain/{name}").spec for name in links]
    assert all(s["objective"] == arm["objective"] == "electra" for s in specs)
    assert all(s["model_config"] == arm["model_config"] for s in specs)
    by_name = {m["name"]: m for m in study.raw["model"]}
    assert [by_name[n].get("continue_from") for n in links] == [None, *links[:-1]]
    tokens = [by_name[n]["tokens"] for n in links]
    assert all(t % (32 * 128) == 0 for t in tokens)
    assert tokens[:3] == [tokens[0], tokens[0], 3 * tokens[0]]  # 1 + 1 + 3 CPU-hours at the first link's rate
    # The 10h and 20h links: the 5h link's CPU per token (its result file) carries the chain from where the
    # first three links' own CPU-seconds left it to about 10, then about 20 CPU-hours.
    results = Path(__file__).resolve().parents[1] / "experiments" / "results" / "pretrain-study"
    done = [json.loads((results / f"pretrain__{name}.json").read_text()) for name in links[:3]]
    at_5h = sum(r["train_cpu_s"] for r in done) / 3600
    per_token = done[2]["train_cpu_s"] / 3600 / done[2]["tokens"]
    at_10h = at_5h + tokens[3] * per_token
    # the 20h link trains in bf16: the same tokens at bf16's share of fp32's CPU per step (the committed
    # step-cost measurement of this recipe), so it ends below 20 CPU-hours with room to spare
    assert by_name[links[4]].get("precision") == "bf16" and all(
        "precision" not in by_name[n] for n in links[:4]
    )
    perf = Path(__file__).resolve().parents[1] / "docs" / "perf"
    cost = json.loads((perf / "step-cost-electra-modernbert-mini-amd-25-17-1-1thread.json").read_text())
    per_step = {row["precision"]: row["cpu_s_per_step"] for row in cost["rows"]}
    at_20h = at_10h + tokens[4] * per_token * per_step["bf16"] / per_step["fp32"]
    assert 9.5 < at_10h < 10.5 and 15 < at_20h < 19, (at_10h, at_20h)


def test_a_pretrained_folder_that_holds_other_weights_than_the_named_ones_is_refused(tmp_path):
    """``pretrained_sha256`` guards a committed model's path, which a later model may take: another model in
    the folder stops its cells instead of being fine-tuned in its place; the guard is no setting, so adding
    it leaves every fingerprint as it was."""
    from lab.experiment.paths import external_model_dir
    from lab.experiment.results import cell_settings

    folder = tmp_path / "published"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"the first model")
    base = MINIMAL + '[[model]]\nname = "p"\npretrained = "published"\n'
    plain = cell_settings(load_matrix(_write(tmp_path, base)))
    sha = hashlib.sha256(b"the first model").hexdigest()
    guarded = load_matrix(_write(tmp_path, base + f'pretrained_sha256 = "{sha}"\n'))
    assert cell_settings(guarded) == plain
    spec = next(m for m in guarded.raw["model"] if m["name"] == "p")
    assert external_model_dir(guarded, spec).resolve() == folder.resolve()
    (folder / "model.safetensors").write_bytes(b"a later model")
    with pytest.raises(
        UserError, match=r"model\.safetensors: sha256 \w+\.\.\., not the \w+\.\.\. that model p's"
    ):
        external_model_dir(guarded, spec)
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="model p: no model.safetensors in"):
        external_model_dir(guarded, spec)


def test_the_studys_bf16_copy_names_the_3h_weights_and_refuses_the_model_that_replaced_them():
    """electra-modernbert-mini-3h-bf16 fine-tuned the 3h model as once published under models/ (the copy that
    survived a change of machine), on SQuAD only, where the fp32 arm had no result. Its cells are finished, and
    the folder now holds the chain's 20h model: the arm's sha256 refuses it, so a re-run cannot silently start
    from the later model, and the error points to the git history where the 3h weights still are."""
    from bertkit.data.shard_build import sha256_file
    from lab.experiment import results_dir, task_models
    from lab.experiment.matrix import resolve
    from lab.experiment.paths import external_model_dir

    root = Path(__file__).resolve().parents[1]
    study = load_matrix(root / "experiments" / "pretrain-study.toml")
    spec = next(m for m in study.raw["model"] if m["name"] == "electra-modernbert-mini-3h-bf16")
    folder = Path(resolve(study.base, spec["pretrained"])).resolve()  # where the guard looks
    assert folder == (root / "models" / "bertkit-electra-modernbert-mini").resolve()
    tuned_on = [t["name"] for t in study.raw["task"] if spec["name"] in task_models(study.raw, t)]
    assert tuned_on == ["SQuAD-v1.1"]
    cells = [c for c in study.cells if c.name.split("/")[1:2] == [spec["name"]]]
    assert len(cells) == 6 and all((results_dir(study) / c.result_name).is_file() for c in cells)
    assert sha256_file(folder / "model.safetensors") != spec["pretrained_sha256"]
    assert "electra-modernbert-mini-20h" in (folder / "README.md").read_text()
    with pytest.raises(UserError, match="git history"):
        external_model_dir(study, spec)


def test_a_random_arm_takes_the_shape_of_its_model_config(tmp_path, tiny_data):
    """A random-init baseline for a ModernBERT arm is a ModernBERT at its initialisation, scored held-out by
    its own masked-LM head; without ``model_config`` it stays BERT's preset."""
    from lab.experiment.pretrain_cells import run_random

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mb.json").write_text(
        json.dumps(
            {
                "model_type": "modernbert",
                "hidden_size": 32,
                "intermediate_size": 48,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "max_position_embeddings": 64,
                "local_attention": 16,
                "pad_token_id": 0,
            }
        )
    )
    text = MINIMAL.replace('preset = "tiny"', 'preset = "tiny"\nmax_seq_length = 64')
    m = load_matrix(_write(tmp_path, text + '[[model]]\nname = "r"\nrandom = true\nmodel_config = "configs/mb.json"\n'
                                    '[[model]]\nname = "rb"\nrandom = true\n'))  # fmt: skip
    out = tmp_path / "out"
    shutil.copytree(tiny_data, out / "prepare" / "data")
    mb = run_random(m, m.cell("pretrain/r"), out, {}, False)
    config = json.loads((Path(mb["model_dir"]) / "config.json").read_text())
    assert config["model_type"] == "modernbert" and mb["model_config"]["hidden_size"] == 32
    assert 0 < mb["metrics"]["mlm_loss"] and mb["metrics"]["distinct_predictions"] > 1
    bert = run_random(m, m.cell("pretrain/rb"), out, {}, False)
    assert json.loads((Path(bert["model_dir"]) / "config.json").read_text())["model_type"] == "bert"


def test_a_summary_naming_an_unknown_task_is_refused_when_the_matrix_loads(tmp_path):
    """[summary] is checked with the rest of the config, before any cell runs, not when the report is written."""
    good = load_matrix(_write(tmp_path, MINIMAL + '[summary]\nmodels = ["a"]\ntasks = ["SST-2"]\n'))
    assert good.raw["summary"]["tasks"] == ["SST-2"]
    with pytest.raises(UserError, match=r"m\.toml: \[summary\] tasks names \['QNLI'\]"):
        load_matrix(_write(tmp_path, MINIMAL + '[summary]\nmodels = ["a"]\ntasks = ["QNLI"]\n'))
