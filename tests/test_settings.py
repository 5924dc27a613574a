"""bertkit's process-wide settings: importing the library leaves the environment as it was, and every
``BERTKIT_*`` variable is read, documented and validated in one module (bertkit.settings)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit import settings
from bertkit.errors import UserError

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
for name in ("bertkit.model", "bertkit.pretrain", "bertkit.tokenizer", "bertkit.sentence.encoder", "bertkit.serving",
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


# ------------------------------------------------------------------------------- BERTKIT_* in one module

NAME = re.compile(r"BERTKIT_[A-Z0-9_]+")


def test_only_the_settings_module_names_a_bertkit_variable():
    named = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "bertkit").rglob("*.py")
        if "BERTKIT_" in p.read_text("utf-8")
    )
    assert named == ["bertkit/settings.py"]


def test_the_docstring_table_lists_every_variable_with_its_values_and_default():
    table = re.findall(r"^``(BERTKIT_[A-Z0-9_]+)``\s+(\S+)\s+(\S+)", settings.__doc__, re.M)
    rows = {name: (values, default) for name, values, default in table}
    assert len(rows) == len(table) == len(settings.ALL) == 10
    assert set(rows) == {s.name for s in settings.ALL}
    for s in settings.ALL:
        values, default = rows[s.name]
        # a flag on by default reads "1"; one without a default is measured or explained in its meaning
        assert default == "1" if s.default is True else default in ("measured", "see"), s.name
        assert s.parse("fp32" if values == "fp32|bf16" else "1") is not None  # the documented kind parses
        if values == "flag":
            assert s.parse("0") != s.parse("1")


def test_the_docs_name_only_variables_that_exist():
    known = {s.name for s in settings.ALL}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        named = set(NAME.findall(page.read_text("utf-8")))
        # the benchmarks' own inputs (benchmarks/inputs.py) are not bertkit's settings
        assert {n for n in named if not n.startswith("BERTKIT_BENCH_")} <= known, page


@pytest.mark.parametrize("setting", settings.ALL, ids=lambda s: s.name)
def test_unset_or_blank_is_the_default_and_each_read_sees_the_environment_now(setting, monkeypatch):
    monkeypatch.delenv(setting.name, raising=False)
    assert setting.value() == setting.default
    monkeypatch.setenv(setting.name, "  ")
    assert setting.value() == setting.default
    precision = "PRECISION" in setting.name or setting is settings.BF16_ATTENTION
    good = "/tmp/x" if setting is settings.CACHE_DIR else ("bf16" if precision else "0")
    monkeypatch.setenv(setting.name, good)  # read per call: a change after import is seen
    assert setting.value() is not None and setting.value() != setting.default


@pytest.mark.parametrize(
    "setting", [s for s in settings.ALL if s is not settings.CACHE_DIR], ids=lambda s: s.name
)
def test_a_bad_value_is_refused_in_one_line_naming_the_variable(setting, monkeypatch):
    monkeypatch.setenv(setting.name, "maybe\nperhaps")
    with pytest.raises(UserError) as e:
        setting.value()
    (line,) = str(e.value).splitlines() or [""]
    assert line.startswith(f"{setting.name} must be ") and line.endswith("got 'maybe\\nperhaps'")


def test_values_parse_as_documented(monkeypatch):
    for text, on in [("1", True), ("0", False), ("off", False), (" Yes ", True), ("FALSE", False)]:
        monkeypatch.setenv("BERTKIT_KEEP_FREED_MEMORY", text)
        assert settings.keep_freed_memory_enabled() is on
        monkeypatch.setenv("BERTKIT_ONEDNN", text)
        assert settings.gemm_backend_override() == ("onednn" if on else "torch")
    monkeypatch.setenv("BERTKIT_CACHE_DIR", "/some/folder")
    assert settings.cache_dir_override() == Path("/some/folder")
    monkeypatch.setenv("BERTKIT_PRECISION", "fp16")
    with pytest.raises(UserError, match="^BERTKIT_PRECISION must be fp32 or bf16, got 'fp16'$"):
        settings.PRECISION.value()


def test_the_callers_refuse_a_bad_value(monkeypatch):
    from bertkit.kernels import gemm
    from bertkit.tuning import cache_dir, choose

    monkeypatch.setenv("BERTKIT_ONEDNN", "2")
    with pytest.raises(UserError, match="^BERTKIT_ONEDNN must be 0 or 1, got '2'$"):
        gemm.choose_linear()
    monkeypatch.setenv("BERTKIT_CHOICE_CACHE", "sometimes")
    with pytest.raises(UserError, match="^BERTKIT_CHOICE_CACHE must be 0 or 1"):
        choose("thing", lambda: ("x", {}))
    monkeypatch.setenv("BERTKIT_CACHE_DIR", "/elsewhere")
    assert cache_dir() == Path("/elsewhere")


def test_the_command_reports_a_bad_setting_in_one_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT), BERTKIT_KERNELS="maybe")
    out = subprocess.run([sys.executable, "-m", "bertkit", "--help"], env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "bertkit: error: BERTKIT_KERNELS must be 0 or 1, got 'maybe'"
