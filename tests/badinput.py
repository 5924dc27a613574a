"""Shared helpers for the bad-input batteries (tests/test_bad_inputs*.py): run a real ``bertkit`` process,
fingerprint a folder, and assert the project's error contract (exit 2, one line naming the culprit, no
traceback, nothing written or changed).

    from badinput import bertkit, snapshot, assert_refused
    before = snapshot(tmp)
    p = bertkit(["pretrain", "--lr", "-1", ...])
    assert_refused(p, "--lr", "-1")
    assert snapshot(tmp) == before
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """The environment for a child ``bertkit``: this checkout first on the path, one thread, no DDP vars."""
    e = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
        TOKENIZERS_PARALLELISM="false",
    )
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        e.pop(k, None)
    return e


def bertkit(args: Sequence[object], *, stdin: str | None = None, timeout: float = 300, cwd=None):
    """Run ``python -m bertkit ARGS``; returns the CompletedProcess (text stdout/stderr)."""
    cmd = [sys.executable, "-m", "bertkit", *map(str, args)]
    return subprocess.run(
        cmd, env=env(), capture_output=True, text=True, timeout=timeout, input=stdin, cwd=cwd
    )


def snapshot(root: str | os.PathLike) -> dict[str, str]:
    """Every path under ``root`` (relative) -> sha256 of its bytes ('dir' for directories, 'link' for links):
    equal snapshots mean nothing was created, removed or changed."""
    root = Path(root)
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The command exited 2 with exactly one error line containing every needle (case-insensitive), and no
    traceback anywhere on stderr. Returns the line."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, proc.stderr[-3000:]
    line = lines[0]
    assert line.startswith("bertkit"), line
    for n in needles:
        assert n.lower() in line.lower(), (n, line)
    return line
