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
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from children import child_env

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """The environment for a child ``bertkit`` (:func:`children.child_env`), tokenizers on one thread too."""
    return child_env(TOKENIZERS_PARALLELISM="false")


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


def assert_refused(proc: subprocess.CompletedProcess | dict, *needles: str) -> str:
    """The command exited 2 with exactly one error line containing every needle (case-insensitive), and no
    traceback anywhere on stderr. Returns the line."""
    stderr = proc["stderr"] if isinstance(proc, dict) else proc.stderr
    rc = proc["rc"] if isinstance(proc, dict) else proc.returncode
    assert "Traceback" not in stderr, stderr[-3000:]
    assert rc == 2, (rc, stderr[-3000:])
    lines = [ln for ln in stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, stderr[-3000:]
    line = lines[0]
    line = line[line.find("bertkit ") :]  # a progress bar's last frame may share the line (carriage returns)
    assert line.startswith("bertkit "), line
    for n in needles:
        assert n.lower() in line.lower(), (n, line)
    return line


# A forking runner: one parent imports bertkit (and torch) once, then each case runs in its own forked
# process exactly as `python -m bertkit ARGS` would (bertkit.cli.main, exit status, its own stdout/stderr),
# which makes a battery of dozens of real processes cost seconds instead of ~2 s of imports each.
_RUNNER = r"""
import hashlib, json, os, sys, traceback
from pathlib import Path
import bertkit.cli, torch  # imported once, before forking

def fingerprint(root):
    out = {}
    for p in sorted(Path(root).rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode]
    return out

cases = json.load(sys.stdin)
results = []
for case in cases:
    before = fingerprint(case["watch"])
    out_path, err_path = case["stdout"], case["stderr"]
    pid = os.fork()
    if pid == 0:
        fo, fe = os.open(out_path, os.O_WRONLY | os.O_CREAT, 0o644), os.open(err_path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.dup2(fo, 1); os.dup2(fe, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1); sys.stderr = os.fdopen(2, "w", buffering=1)
        os.chdir(case["cwd"])
        code = 1
        try:
            code = bertkit.cli.main(case["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    results.append({"rc": os.waitstatus_to_exitcode(status), "changed": fingerprint(case["watch"]) != before})
json.dump(results, sys.stdout)
"""


def run_forked(cases: Sequence[dict], tmp: Path, timeout: float = 600) -> list[dict]:
    """Run ``cases`` (dicts with ``argv``, ``cwd`` and ``watch``, a folder that must not change) as forked
    ``bertkit`` processes; returns per case ``rc``, ``stdout``, ``stderr`` and ``changed`` (watch changed)."""
    tmp = Path(tmp)
    jobs = []
    for i, c in enumerate(cases):
        jobs.append({**c, "argv": [str(a) for a in c["argv"]], "cwd": str(c["cwd"]), "watch": str(c["watch"]),
                     "stdout": str(tmp / f"case{i}.out"), "stderr": str(tmp / f"case{i}.err")})  # fmt: skip
    p = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(jobs), env=env(), capture_output=True,
                       text=True, timeout=timeout)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(p.stdout)
    for job, r in zip(jobs, results):
        r["stdout"] = Path(job["stdout"]).read_text(errors="replace")
        r["stderr"] = Path(job["stderr"]).read_text(errors="replace")
    return results
