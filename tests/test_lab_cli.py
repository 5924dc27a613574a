"""`python -m lab experiment|report`: the lab's command line, run from the repository root, and the bertkit
wheel that leaves the lab out."""

from __future__ import annotations

import json
import subprocess
import sys

from children import ROOT, child_env
from test_experiment import MINIMAL
from test_report import _fixture

from bertkit import model_card
from lab.__main__ import main


def test_experiment_dry_run_lists_the_cells_and_records_its_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(model_card, "_COMMAND", None)  # restored after: other tests' model cards
    cfg = tmp_path / "m.toml"
    cfg.write_text(MINIMAL)
    assert main(["experiment", str(cfg), "--dry-run", "--only", "pretrain/a"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["matrix"] == "t" and "pretrain/a" in summary["to_run"] and "finetune" not in str(summary)
    # the runs' model cards quote the lab's command, not `bertkit` (what its __main__.py argv[0] would give)
    assert model_card.invoked_command() == f"python -m lab experiment {cfg} --dry-run --only pretrain/a"


def test_report_writes_the_doc_from_the_result_files(tmp_path, capsys):
    cfg, res = _fixture(tmp_path)
    doc = tmp_path / "out" / "paper.md"
    assert main(["report", str(cfg), "--results", str(res), "--doc", str(doc)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["report"] == str(doc) and summary["results"] > 0
    assert doc.read_text().startswith("# ") and "python -m lab report" in doc.read_text()


def test_a_user_error_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python -m lab report: error: {tmp_path / 'missing.toml'}: config file not found"]


def test_report_takes_no_run_options(tmp_path, capsys):
    cfg, _ = _fixture(tmp_path)
    try:
        main(["report", str(cfg), "--only", "x"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("--only accepted by report")
    assert "unrecognized arguments: --only x" in capsys.readouterr().err


def test_the_lab_and_the_demo_run_from_the_repository_root(tmp_path):
    # `make run` is `python -m lab.demo`: the root (the working directory) is what makes `lab` importable
    env = child_env()
    env.pop("PYTHONPATH")
    for module, needle in (("lab", "report"), ("lab.demo", "--train-seconds")):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert needle in proc.stdout


def test_the_wheel_ships_bertkit_and_not_the_lab():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(ROOT), include=find["include"])
    assert "bertkit" in packages and "bertkit.cli" in packages
    assert not [p for p in packages if p.split(".")[0] in ("lab", "benchmarks", "experiments", "tests")]
    assert (ROOT / "lab" / "__init__.py").is_file()
