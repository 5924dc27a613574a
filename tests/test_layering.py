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
