"""Layering: library code (tasks, training) never imports the command line, which sits on top of it; and the
library never imports the lab (experiments, reports, the demo), the benchmarks or the experiment scripts, nor
names the lab's studies (the paper's Tables 5-7)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "bertkit"
OUTSIDE = ("lab", "benchmarks", "experiments")  # what sits on top of the library, in this repository only
STUDY = re.compile(r"table[567]", re.IGNORECASE)  # the paper's Tables 5-7: the lab's studies


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("package", ["tasks", "train", "data"])
def test_library_packages_do_not_import_the_cli(package):
    files = sorted((ROOT / package).glob("*.py"))
    assert files
    offenders = {
        f.name: sorted(n for n in _imports(f) if n == "bertkit.cli" or n.startswith("bertkit.cli."))
        for f in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_a_cli_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from bertkit.cli.finetune import add_trainer_arguments\n", encoding="utf-8")
    assert "bertkit.cli.finetune" in _imports(f)


def _outside_imports(path: Path) -> list[str]:
    """The modules of ``lab``, ``benchmarks`` or ``experiments`` that ``path`` imports (at any depth)."""
    return sorted(n for n in _imports(path) if n.split(".")[0] in OUTSIDE)


def _study_names(path: Path) -> list[str]:
    """Identifiers (names, attributes, functions, classes, arguments, imported names) naming Tables 5-7."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        for name in (
            getattr(node, "id", None),  # Name
            getattr(node, "attr", None),  # Attribute
            getattr(node, "arg", None),  # arguments, keywords
            getattr(node, "name", None) if not isinstance(node, ast.alias) else node.asname or node.name,
        ):
            if isinstance(name, str) and STUDY.search(name):
                found.add(name)
    return sorted(found)


def test_bertkit_does_not_import_the_lab_benchmarks_or_experiments():
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 50
    offenders = {str(f.relative_to(ROOT)): _outside_imports(f) for f in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_bertkit_names_no_study_of_the_lab():
    files = sorted(ROOT.rglob("*.py"))
    offenders = {str(f.relative_to(ROOT)): _study_names(f) for f in files}
    assert {k: v for k, v in offenders.items() if v} == {}
    # as `grep -rnE "table[567]" bertkit/`: not in comments or strings either
    lines = [f"{f.relative_to(ROOT)}:{i}" for f in files
             for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if STUDY.search(line)]  # fmt: skip
    assert lines == []


@pytest.mark.parametrize(
    "check, source, found",
    [
        (_outside_imports, "import lab.experiment\n", True),
        (_outside_imports, "from lab.report import write_report\n", True),
        (_outside_imports, "def f():\n    from benchmarks.common import compare\n", True),
        (_outside_imports, "import experiments\n", True),
        (_outside_imports, "from lab import demo\n", True),
        (
            _outside_imports,
            "import bertkit.labels\nfrom bertkit import experimental\nimport laboratory\n",
            False,
        ),
        (_study_names, "TABLE5 = 1\n", True),
        (_study_names, "def table6_rows(raw):\n    pass\n", True),
        (_study_names, "x = m.paper_table7\n", True),
        (_study_names, "class Table5Row:\n    pass\n", True),
        (_study_names, "def f(table5_names=None):\n    pass\n", True),
        (_study_names, "from x import table7\n", True),
        (_study_names, "table = 1\ntable8 = table4 = 2\n# Table 5 of the paper\n", False),
    ],
)
def test_the_checks_see_what_they_look_for(tmp_path, check, source, found):
    f = tmp_path / "x.py"
    f.write_text(source, encoding="utf-8")
    assert bool(check(f)) is found


# A module may offer others only what it defines: a name it lists in __all__ but imports, or imports unused
# (``noqa: F401``) for callers, is a re-export shim, and its importers should import the defining module. The
# server app's Limits goes with the server's rework.
_REEXPORTS_LEFT = {"serving/app.py": {"Limits"}}


def _reexports(path: Path) -> set[str]:
    """The names ``path`` re-exports: listed in its ``__all__`` but imported, or imported at the top with
    ``noqa: F401``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    imported: set[str] = set()
    offered: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in node.names}
            imported |= names
            if any("noqa: F401" in line for line in lines[node.lineno - 1 : node.end_lineno]):
                offered |= names
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            offered |= set(ast.literal_eval(node.value))
    return offered & imported


def test_no_module_re_exports_another_modules_names():
    found = {
        str(f.relative_to(ROOT)): names
        for f in sorted(ROOT.rglob("*.py"))
        if f.name != "__init__.py" and (names := _reexports(f))  # a package's __init__ is its public face
    }
    assert found == _REEXPORTS_LEFT


def test_the_re_export_check_sees_one(tmp_path):
    f = tmp_path / "x.py"
    f.write_text(
        "from a import b\nfrom c import d\n\n\ndef e(): ...\n\n\n__all__ = ['b', 'e']\n", encoding="utf-8"
    )
    assert _reexports(f) == {"b"}
    f.write_text(
        "from a import (  # noqa: F401  (for callers)\n    b,\n    c,\n)\nfrom d import e\n", encoding="utf-8"
    )
    assert _reexports(f) == {"b", "c"}
