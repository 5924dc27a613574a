"""The fast loop's list of slow modules names modules that exist (a renamed module must not leave it silently)."""

from __future__ import annotations

from pathlib import Path

from conftest import SLOW_MODULES


def test_every_slow_module_exists():
    here = Path(__file__).parent
    assert SLOW_MODULES and all((here / f"{name}.py").is_file() for name in SLOW_MODULES)


def test_the_slow_marker_is_applied(request):
    """This module is not slow; a module in the list would be marked (checked on a collected item)."""
    assert request.node.get_closest_marker("slow") is None
