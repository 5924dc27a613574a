"""The ``bertkit`` command: a thin layer that parses arguments, calls the library and prints JSON.

Each module named in ``SUBCOMMAND_MODULES`` defines ``register(subparsers)``; every subcommand's
handler takes the parsed ``args`` and returns a JSON-able dict, which ``main`` prints.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import io
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from .. import __version__
from ..errors import UserError

SUBCOMMAND_MODULES = (
    "core",
    "data",
    "pretrain",
    "finetune",
    "predict",
    "embed",
    "serve",
    "index",
    "retrieval",
    "distill",
    "tune",
)


# OS errors that are about the user's files or machine (a full disk, a read-only or missing path), not bugs:
# reported in one line like a UserError.
_USER_ERRNOS = {
    errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR,
    errno.ENOTDIR, errno.EEXIST, errno.EFBIG, errno.ENAMETOOLONG, errno.ENOTEMPTY,
}  # fmt: skip


# Failed writes that libraries report without an errno (a full disk, mostly): torch.save's stream writer raises
# RuntimeError, numpy's writers an errno-less OSError, SQLite its OperationalError.
_WRITE_FAILURES = ("file write failed", "failed writing file", "requested and", "database or disk is full")


def _write_failure(e: BaseException) -> str | None:
    """One line for a failed write reported without an errno, None for anything else (a bug: re-raised)."""
    text = " ".join(str(e).split())
    if not any(marker in text for marker in _WRITE_FAILURES):
        return None
    name = _file_in_traceback(e.__traceback__)
    reason = text.rsplit("] ", 1)[-1][-160:]  # torch prefixes the C++ source location
    return f"{name + ': ' if name else ''}writing failed ({reason}); is the disk full?"


def _fail(command: str | None, message: str) -> int:
    """Print the one-line error of ``bertkit COMMAND`` and return the exit status 2."""
    line = " ".join(str(message).split())  # one line, whatever the message held
    print(f"bertkit {command}: error: {line}" if command else f"bertkit: error: {line}", file=sys.stderr)
    return 2


def _file_in_traceback(tb) -> str | None:
    """The name of the file being read where an error was raised: the innermost frame holding an open file
    (``with open(path) as f``) or a ``path``."""
    found = None
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, io.IOBase) and isinstance(getattr(value, "name", None), str):
                found = value.name
        local_path = tb.tb_frame.f_locals.get("path")
        if isinstance(local_path, (str, Path)):
            found = str(local_path)
        tb = tb.tb_next
    return found


def build_parser() -> argparse.ArgumentParser:
    from .args import Parser

    parser = Parser(
        prog="bertkit",
        description="bertkit: WordPiece, BERT pre-training, fine-tuning, embeddings and serving on PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


# Set when a command destroyed the process group it ran under (a torchrun rank): :func:`run` then ends the
# process without finalizing the interpreter (see there).
_closed_group: list[bool] = []


@contextlib.contextmanager
def _process_group_closed() -> Iterator[None]:
    """Destroy the torch.distributed process group a command opened (under torchrun) when it ends."""
    try:
        yield
    finally:
        if "torch" in sys.modules:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
                _closed_group.append(True)


def _exit_without_finalizing(code: int) -> NoReturn:
    """Flush what the process wrote, run its exit handlers and end it at once, skipping interpreter teardown.

    Why: gloo's worker threads outlive ``destroy_process_group`` (gloo's shutdown is a no-op and torch keeps the
    group referenced, under FSDP from DTensor's planner and sharding caches among others), and a worker that finishes with a
    collective after its ``wait()`` returned still drops that collective's tensors. When that drop comes while
    the interpreter is being torn down, the worker asks for the GIL, Python ends the thread with
    ``pthread_exit`` and its forced unwind through gloo's ``noexcept`` loop calls ``std::terminate``: the rank
    aborts ("terminate called without an active exception") after its work was done. Without teardown there is
    nothing for the thread to race."""
    import atexit

    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing left to say
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    from bertkit.tuning import apply_process_defaults

    # first thing: a command that imports torch starts OpenMP's thread pool, which reads the setting once
    apply_process_defaults()
    from bertkit.settings import check_all

    try:
        check_all()
        parser = build_parser()
    except UserError as e:  # a bad setting (bertkit.settings), read before any subcommand's module loads
        return _fail(None, str(e))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from bertkit.io import resolve_model_dir
    from bertkit.model_card import set_command

    set_command(["bertkit", *(sys.argv[1:] if argv is None else map(str, argv))])  # for model cards

    # A run's output dir (OUT, holding OUT/model) works wherever a model dir is expected.
    for name in ("model_dir", "model"):
        if isinstance(getattr(args, name, None), (str, Path)):
            setattr(args, name, type(getattr(args, name))(resolve_model_dir(getattr(args, name))))
    from .args import claim_outputs

    try:
        with claim_outputs(args), _process_group_closed():  # refuses an existing output before anything runs
            result = args.func(args)
    except UserError as e:
        return _fail(args.command, str(e))
    except UnicodeDecodeError as e:  # a reader that did not use bertkit.io.read_text: still one line
        name = _file_in_traceback(e.__traceback__)
        return _fail(
            args.command,
            f"{name or 'input'}: not UTF-8 (byte {e.object[e.start]:#04x}); re-encode it as UTF-8",
        )
    except (OSError, RuntimeError, sqlite3.OperationalError) as e:
        failure = _write_failure(e) if getattr(e, "errno", None) is None else None
        if failure is not None:
            return _fail(args.command, failure)
        if not isinstance(e, OSError) or e.errno not in _USER_ERRNOS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        return _fail(args.command, f"{where}{e.strerror or e}")
    except KeyboardInterrupt as e:  # a training stopped by SIGTERM / SIGINT (bertkit.train.stop) says where
        if hasattr(e, "exit_status"):  # its checkpoint is, and how to go on from it
            print(
                f"bertkit {args.command}: {e}; run the same command with --resume to continue",
                file=sys.stderr,
            )
            return e.exit_status
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130
    if result is not None:
        try:
            print(json.dumps(result, indent=2, ensure_ascii=False))
        except BrokenPipeError:  # e.g. piped into `head`: the reader has gone, nothing left to say
            sys.stderr.close()
    return 0


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``bertkit`` program: :func:`main`, then the exit status. A command that ran under a torchrun
    process group ends without interpreter teardown (:func:`_exit_without_finalizing`), a failure too."""
    _closed_group.clear()
    try:
        code = main(argv)
    except SystemExit:
        raise
    except BaseException:
        if not _closed_group:
            raise
        import traceback

        traceback.print_exc()
        code = 1
    if _closed_group:
        _exit_without_finalizing(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
