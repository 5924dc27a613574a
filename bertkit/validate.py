"""Value checks shared by the command line (argparse types in :mod:`bertkit.cli.args`) and config files
(TOML/YAML settings): each returns the value converted, or raises a one-line :class:`UserError` that names the
setting, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from .errors import UserError


def _number(value: Any, name: str, kind: type, integer: str = "an integer") -> Any:
    """``value`` as ``kind`` (int or float), from a number or its text; ``integer`` names what an int must be
    in the message (e.g. "a positive integer", so "1.5" is refused in the words of the limit it breaks)."""
    # bools are ints in Python, but `steps = true` in a TOML file is a mistake, not 1
    if isinstance(value, bool):
        raise UserError(f"{name}: {value!r} is not a number")
    if isinstance(value, str):
        try:
            value = kind(value.strip())
        except ValueError:
            raise UserError(f"{name}: {value!r} is not {integer if kind is int else 'a number'}") from None
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise UserError(f"{name}: {value!r} is not {integer}")
        return value
    if not isinstance(value, (int, float)):
        raise UserError(f"{name}: {value!r} is not a number")
    value = float(value)
    if not math.isfinite(value):
        raise UserError(f"{name}: {value!r} is not a finite number")
    return value


def positive_int(value: Any, name: str = "value") -> int:
    v = _number(value, name, int, "a positive integer")
    if v < 1:
        raise UserError(f"{name}: {v} must be a positive integer (>= 1)")
    return v


def non_negative_int(value: Any, name: str = "value") -> int:
    v = _number(value, name, int)
    if v < 0:
        raise UserError(f"{name}: {v} must be >= 0 (0 = off)")
    return v


def int_in(value: Any, name: str, low: int, high: int) -> int:
    v = _number(value, name, int)
    if not low <= v <= high:
        raise UserError(f"{name}: {v} is outside {low}..{high}")
    return v


def positive_float(value: Any, name: str = "value") -> float:
    v = _number(value, name, float)
    if v <= 0:
        raise UserError(f"{name}: {v:g} must be a finite number > 0")
    return v


def non_negative_float(value: Any, name: str = "value") -> float:
    v = _number(value, name, float)
    if v < 0:
        raise UserError(f"{name}: {v:g} must be a finite number >= 0")
    return v


def probability(value: Any, name: str = "value") -> float:
    v = _number(value, name, float)
    if not 0.0 <= v <= 1.0:
        raise UserError(f"{name}: {v:g} must be a probability in [0, 1]")
    return v


def open_probability(value: Any, name: str = "value") -> float:
    """A probability strictly above 0 (a rate that must do something, e.g. the masking rate)."""
    v = probability(value, name)
    if v == 0.0:
        raise UserError(f"{name}: 0 must be a probability in (0, 1]")
    return v


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if origin is not None:
        hint = origin
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if hint is type(None):
        return "nothing"
    hint = origin or hint
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string", dict: "a table"}
    return names.get(hint, "a list" if hint is list else getattr(hint, "__name__", str(hint)))


def check_field_types(cls: type, data: dict[str, Any], source: str) -> None:
    """UserError naming ``source`` and the field when a value in ``data`` does not have the type that the
    dataclass ``cls`` declares for it (e.g. ``steps = "many"`` in a TOML file)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data and not _type_ok(data[f.name], hints[f.name]):
            raise UserError(f"{source}: {f.name} = {data[f.name]!r} must be {_type_name(hints[f.name])}")


def check_values(data: dict[str, Any], checks: dict[str, str], source: str) -> None:
    """Run the check named in ``checks`` (a function of this module) on each value of ``data`` that has one
    and is not None; the UserError names ``source`` and the field."""
    for name, check in checks.items():
        if data.get(name) is not None:
            try:
                globals()[check](data[name], name)
            except UserError as e:
                raise UserError(f"{source}: {e}") from None


def check_device(text: str) -> str:
    """``text`` if it names a torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ``mps``), else a
    UserError in one line: a typo or a missing GPU is refused before a run starts, not deep inside it."""
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise UserError(f"{text!r} is not a device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"{text}: CUDA is not available on this machine; use cpu")
        if dev.index is not None and dev.index >= count:
            raise UserError(f"{text}: this machine has {count} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{text}: MPS is not available on this machine; use cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"{text}: unsupported device type; use cpu, cuda or cuda:N")
    return text
