"""Two `python -m lab experiment` processes on one matrix, side by side (one per core, as the lab runs them):
no cell starts before the cells it needs have finished, and each cell runs once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from test_experiment import MINIMAL

from lab.experiment import load_matrix

# A runner process whose cells are fakes: each logs its name, and logs MISSING when a cell it needs has no
# result file yet. The first runner's `vocab` holds on until the second runner has either gone ahead with a
# cell or started waiting for the first (so the second always starts while `vocab` is held).
RUNNER = """
import sys, time
from pathlib import Path
from lab.__main__ import main
from lab.experiment import cells, locks, runner

cfg, out, res, log, me = sys.argv[1:6]
res, log, waiting = Path(res), Path(log), Path(log).with_suffix(".waiting")
locks.POLL_OTHER_RUNNERS_S = 0.05
wait = runner.wait_for_other_runners

def waits(*args):
    waiting.touch()
    return wait(*args)

def fake_run_cell(matrix, cell, out, done, info, progress=True):
    missing = [n for n in cell.needs if not (res / matrix.cell(n).result_name).is_file()]
    with log.open("a") as f:
        f.write(f"{me} {cell.name} {'MISSING ' + ' '.join(missing) if missing else 'ok'}\\n")
    if me == "first" and cell.name == "vocab":
        deadline = time.time() + 60
        while not waiting.exists() and " second " not in " " + log.read_text() and time.time() < deadline:
            time.sleep(0.02)
    return {"primary": 1.0, "seed": cell.spec.get("seed")}

runner.wait_for_other_runners = waits
cells.run_cell = fake_run_cell
sys.exit(main(["experiment", cfg, "--out", out, "--results", str(res), "--quiet"]))
"""


def test_a_second_runner_starts_no_cell_before_its_inputs_exist(tmp_path: Path) -> None:
    cfg = tmp_path / "m.toml"
    cfg.write_text(MINIMAL)
    out, res, log = tmp_path / "out", tmp_path / "res", tmp_path / "log.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}  # fmt: skip

    def start(me: str) -> subprocess.Popen:
        args = [sys.executable, "-c", RUNNER, str(cfg), str(out), str(res), str(log), me]
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    first = start("first")
    vocab_lock = out / "locks" / "vocab.lock"
    while not vocab_lock.exists() and first.poll() is None:  # until the first runner holds `vocab`
        time.sleep(0.02)
    second = start("second")
    outputs = [p.communicate(timeout=120)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    runs = [line.split() for line in log.read_text().splitlines()]
    assert [r for r in runs if r[2] != "ok"] == []  # no cell ran before its inputs' result files
    cells = [c.name for c in load_matrix(cfg).cells]
    assert sorted(r[1] for r in runs) == sorted(cells)  # every cell, once
