"""Packages that export their names lazily (``bertkit.lazy.lazy_getattr``): every exported name resolves to
the class or function its module defines, an unknown name is an AttributeError, and importing the package
alone does not import torch."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ("bertkit", "bertkit.data", "bertkit.serving")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_resolves_to_its_defining_module(package):
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        module = getattr(value, "__module__", None)
        assert module is None or module.startswith(package), (name, module)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        pkg.nothing_here  # noqa: B018


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_the_package_alone_leaves_torch_out(package):
    code = f"import sys, {package}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
