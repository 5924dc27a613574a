"""bertkit's process-wide settings: importing the library leaves the environment as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# a saturated machine (the load average faked before bertkit is imported): where a process default would be
# set, it would be set here
_SNAPSHOT = """
import json, os
os.getloadavg = lambda: (3.0, 0.0, 0.0)
os.cpu_count = lambda: 2
changed = {}

def diff(before):
    return sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))

before = dict(os.environ)
import bertkit
changed["bertkit"] = diff(before)
import torch  # torch's own import is not ours to judge: the snapshot is taken after it
for name in ("bertkit.model", "bertkit.pretrain", "bertkit.tokenizer", "bertkit.embed", "bertkit.serving",
             "bertkit.cli"):
    before = dict(os.environ)
    try:
        __import__(name)
    except ImportError as e:  # an extra that is not installed
        changed[name] = "not importable: " + str(e)
        continue
    changed[name] = diff(before)
print(json.dumps(changed))
"""


def test_importing_bertkit_leaves_the_environment_unchanged():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    )
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert changed.pop("bertkit") == []  # before torch: where OMP_WAIT_POLICY used to be set on import
    assert changed.pop("bertkit.model") == [] and changed.pop("bertkit.pretrain") == []
    assert all(v == [] or v.startswith("not importable") for v in changed.values()), changed
