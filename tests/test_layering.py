"""Layering: library code (tasks, training) never imports the command line, which sits on top of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "bertkit"


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
