"""The one validation layer of the command line: argparse types for numbers and paths, the parser whose
errors are one line, and the rule for outputs (an existing output is never touched unless ``--overwrite``
replaces it or ``--resume`` continues it; a failed command leaves nothing behind).

Use in a ``register(subparsers)``::

    from bertkit.cli import args as A
    p.add_argument("--steps", type=A.positive_int)
    p.add_argument("--masked-lm-prob", type=A.probability)
    p.add_argument("--train", type=A.existing_file, required=True)
    A.add_output(p, "--out", kind="dir", resumable=True)   # adds --overwrite (and checks --resume)

``main`` then claims every output declared with :func:`add_output` before the handler runs
(:func:`claim_outputs`), so a refusal happens before anything is written. A handler whose output path is
only known later (e.g. ``out = ...`` in a config file) calls :func:`claim_output` itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from .. import validate
from ..errors import UserError
from ..io import TEMP_SUFFIX


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``bertkit CMD: error: ...``) with exit status 2.

    A value that is a comma-separated list of negative numbers (``--layers -1,-2,-3,-4``) is a value, not an
    option: argparse only takes a single number such as ``-1`` for one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d+(,-?\d+)*$|^-\d*\.\d+$")

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _argtype(check: Callable[..., Any], name: str) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return check(text, "value")
        except UserError as e:
            # argparse prefixes "argument --flag: "; drop our own "value: " prefix
            raise argparse.ArgumentTypeError(str(e).removeprefix("value: ")) from None

    convert.__name__ = name  # argparse names the type in "invalid <name> value" messages
    return convert


positive_int = _argtype(validate.positive_int, "positive_int")
non_negative_int = _argtype(validate.non_negative_int, "non_negative_int")
positive_float = _argtype(validate.positive_float, "positive_float")
non_negative_float = _argtype(validate.non_negative_float, "non_negative_float")
probability = _argtype(validate.probability, "probability")
open_probability = _argtype(validate.open_probability, "open_probability")


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``low..high`` (inclusive)."""
    return _argtype(lambda v, n: validate.int_in(v, n, low, high), f"int_{low}_{high}")


# a torch device this machine has (:func:`bertkit.validate.check_device`), checked at parse time
device = _argtype(lambda text, _: validate.check_device(text), "device")


def _existing(what: str, is_kind: Callable[[Path], bool] | None, name: str) -> Callable[[str], Path]:
    """An argparse type: an existing path that ``is_kind`` accepts (None: a file or a directory)."""

    def convert(text: str) -> Path:
        p = Path(text)
        if not p.exists():
            raise argparse.ArgumentTypeError(f"{text}: no such {what}")
        if is_kind is not None and not is_kind(p):
            raise argparse.ArgumentTypeError(f"{text}: not a {what}")
        return p

    convert.__name__ = name
    return convert


existing_file = _existing("file", Path.is_file, "existing_file")
existing_dir = _existing("directory", Path.is_dir, "existing_dir")
existing_path = _existing("file or directory", None, "existing_path")


# --------------------------------------------------------------------------------------------- outputs

OUTPUTS_ATTR = "_bertkit_outputs"  # argparse default holding the outputs add_output declared


def add_output(
    p: argparse.ArgumentParser,
    flag: str = "--out",
    *,
    kind: str = "dir",
    resumable: bool | Callable[[Path], bool] = False,
    required: bool = True,
    **kwargs: Any,
) -> None:
    """Add the output argument ``flag`` (``"--out"`` or a positional name) and ``--overwrite``.

    ``kind`` is ``"dir"`` or ``"file"``. ``resumable``: the command has ``--resume`` (added elsewhere), which
    continues an existing output instead of refusing it; True means "when it holds a training checkpoint",
    a function ``path -> bool`` says itself what can be resumed."""
    if kind not in ("dir", "file"):
        raise ValueError(kind)
    if flag.startswith("-"):
        action = p.add_argument(flag, required=required, **kwargs)
    else:
        action = p.add_argument(flag, **kwargs)
    if not any("--overwrite" in a.option_strings for a in p._actions):
        p.add_argument(
            "--overwrite", action="store_true", help="replace an existing output (by default it is refused)"
        )
    outputs = list(p.get_default(OUTPUTS_ATTR) or [])
    outputs.append((action.dest, flag, kind, resumable))
    p.set_defaults(**{OUTPUTS_ATTR: tuple(outputs)})


def add_inference_precision(p: argparse.ArgumentParser) -> None:
    """``--precision fp32|bf16|auto`` of the inference commands (``bertkit.inference_precision``)."""
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16", "auto"),
        default="fp32",
        help="bf16: bf16 autocast; auto: bf16 where this CPU runs it faster and its outputs agree with "
        "fp32's (measured once, cached per machine), else fp32 (default: fp32, the exact path)",
    )


def add_training_precision(p: argparse.ArgumentParser) -> None:
    """``--precision fp32|bf16|fp16|auto`` of the training commands that take no other Trainer options."""
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16", "fp16", "auto"),
        default="fp32",
        help="auto: bf16 autocast where it measured faster on this CPU and its loss agreed, else fp32",
    )


def json_or_text(text: str) -> Any:
    """``text`` read as JSON where it parses (numbers, true/false, quoted strings), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def has_checkpoints(path: Path) -> bool:
    """Whether a run directory holds a training checkpoint (its own or one of its sub-runs')."""
    return path.is_dir() and any(path.glob("**/checkpoints/step-*.pt"))


def _is_occupied(path: Path) -> bool:
    if path.is_symlink() or path.is_file():
        return True
    return path.is_dir() and any(path.iterdir())


def _rank() -> int:
    # Under torchrun every rank runs the command; rank 0 alone claims (and cleans up) the outputs.
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _overwrite_backups(path: Path) -> list[Path]:
    """The previous outputs that an ``--overwrite`` of ``path`` moved aside and, killed, never deleted or put back."""
    pattern = f".{path.name}.overwritten.*{TEMP_SUFFIX}"
    return sorted(b / path.name for b in path.parent.glob(pattern) if (b / path.name).exists())


def _refuse_after_an_interrupted_overwrite(path: Path, flag: str) -> None:
    # A SIGKILL between moving the old output aside and finishing leaves the old output only in a hidden
    # sibling, and a half-written new one at ``path``. Which one the user wants cannot be guessed, and a second
    # --overwrite must not silently bury it: say where it is and stop. (--resume never gets here.)
    backups = _overwrite_backups(path)
    if backups:
        raise UserError(
            f"{flag} {path}: an earlier --overwrite of it was killed; the output it replaced is in {backups[0]} "
            f"and {path} may be incomplete: restore it with `rm -rf {path} && mv {backups[0]} {path}` "
            f"(then `rmdir {backups[0].parent}`), or `rm -rf {backups[0].parent}` to drop it"
        )


@contextlib.contextmanager
def claim_output(
    path: str | os.PathLike,
    *,
    flag: str = "--out",
    kind: str = "dir",
    overwrite: bool = False,
    resume: bool = False,
    resumable: bool = False,
    can_resume: Callable[[Path], bool] = has_checkpoints,
) -> Iterator[Path]:
    """Check ``path`` may be written, then yield it; undo on failure.

    - exists and not empty, no ``--overwrite``/``--resume``: UserError (nothing is touched).
    - ``--resume``: ``can_resume(path)`` must hold (e.g. a checkpoint is there), else UserError.
    - ``--overwrite``: the old output is moved aside (a hidden sibling) and deleted when the command
      succeeds, or put back when it fails.
    - on failure, what the command wrote is removed unless the run can be resumed from it (checkpoints);
      a directory created for the command is removed with it.
    """
    path = Path(path)
    if _rank() != 0:
        yield path
        return
    if kind == "dir" and path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: is a file, not a directory; choose a directory path")
    if kind == "file" and path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; give a file path")
    if resume:
        if not can_resume(path):
            raise UserError(
                f"--resume: {path} holds nothing to resume (no checkpoint); drop --resume to start a new run"
            )
        yield path
        return
    _refuse_after_an_interrupted_overwrite(path, flag)
    existed = path.exists()
    backup: Path | None = None
    if _is_occupied(path):
        if not overwrite:
            hint = ", --resume to continue it" if resumable else ""
            raise UserError(
                f"{flag} {path}: already exists; choose a new path, --overwrite to replace it{hint}"
            )
        backup = Path(
            tempfile.mkdtemp(prefix=f".{path.name}.overwritten.", suffix=TEMP_SUFFIX, dir=path.parent)
        )
        os.replace(path, backup / path.name)
        existed = False
    try:
        yield path
    except BaseException:
        if not (kind == "dir" and has_checkpoints(path)):
            if existed:  # an empty directory the user made: leave it empty again (a device: leave it)
                for item in path.iterdir() if path.is_dir() else ():
                    _remove(item)
            else:
                _remove(path)
            if backup is not None:
                os.replace(backup / path.name, path)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


@contextlib.contextmanager
def claim_outputs(args: argparse.Namespace) -> Iterator[None]:
    """:func:`claim_output` for every output the subcommand declared with :func:`add_output`."""
    with contextlib.ExitStack() as stack:
        for dest, flag, kind, resumable in getattr(args, OUTPUTS_ATTR, None) or ():
            value = getattr(args, dest, None)
            if value is None:
                continue
            stack.enter_context(
                claim_output(
                    value,
                    flag=flag if flag.startswith("-") else flag.upper(),
                    kind=kind,
                    overwrite=bool(getattr(args, "overwrite", False)),
                    resume=bool(getattr(args, "resume", False)) and bool(resumable),
                    resumable=bool(resumable),
                    can_resume=resumable if callable(resumable) else has_checkpoints,
                )
            )
        yield
