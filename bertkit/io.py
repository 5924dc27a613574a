"""Atomic file and directory writes (nothing half-written is ever left under the final name, and the files get
the permissions the umask asks for), UTF-8 and JSON Lines reading with a file:line error, and where a model
directory is."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import UserError

logger = logging.getLogger("bertkit")

TEMP_SUFFIX = ".tmp"  # atomic_write / atomic_dir temp names: f".{final name}.{random}.tmp" beside the target


def _umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask can only be read by setting)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _chmod_as_umask(path: str | os.PathLike, is_dir: bool = False) -> None:
    # mkstemp/mkdtemp create 0600/0700 whatever the umask; a plain open()/mkdir() would give 0666/0777 & ~umask,
    # which is what a model or data set written by one account and served by another needs.
    os.chmod(path, (0o777 if is_dir else 0o666) & ~_umask())


def remove_stale_temps(directory: str | os.PathLike) -> list[Path]:
    """Delete the temp files/dirs that an atomic write killed mid-way (SIGKILL, power loss) left in
    ``directory``; call it where a single writer starts. Returns what was removed."""
    directory = Path(directory)
    removed = []
    if not directory.is_dir():
        return removed
    for item in directory.iterdir():
        if item.name.startswith(".") and item.name.endswith(TEMP_SUFFIX):
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    item.unlink()
            removed.append(item)
    if removed:
        logger.info("removed %d stale temp file(s) in %s", len(removed), directory)
    return removed


@contextlib.contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """The ways opening or reading a file fails, as one-line UserErrors naming it."""
    try:
        yield
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a {what}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read the {what} ({e.strerror})") from None


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """The text of a UTF-8 file (a BOM is dropped); UserError naming the file and line when it is missing,
    a directory, or not UTF-8."""
    path = Path(path)
    with _reading(path, what):
        data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start}); re-encode the {what} as UTF-8"
        ) from None


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """A JSON file's value; a one-line UserError naming the file (and the line) when it is missing, not UTF-8
    or not valid JSON."""
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None


def read_json_object(path: str | os.PathLike, what: str = "JSON file") -> dict[str, Any]:
    """The JSON object in ``path``, ``{}`` when there is no such file; UserError as :func:`read_json`, or
    when the file holds something other than an object."""
    if not Path(path).is_file():
        return {}
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def open_text(path: str | os.PathLike, what: str = "file", newline: str | None = None) -> io.StringIO:
    """A drop-in for ``open(path, encoding="utf-8")`` in readers: the whole file checked by :func:`read_text`
    (UserError naming ``path:line`` when it is not UTF-8 or missing), as a text stream."""
    return io.StringIO(read_text(path, what), newline=newline)


def decode_line(raw: bytes, path: str | os.PathLike, lineno: int) -> str:
    """One line of a file read in binary, decoded as UTF-8; UserError naming ``path:lineno`` if it is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}:{lineno}: not UTF-8 (byte {raw[e.start]:#04x}); re-encode the file as UTF-8"
        ) from None


def read_jsonl(
    path: str | os.PathLike, what: str = "file", objects: bool = False
) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON Lines file; UserError naming the file (and the
    line) when it cannot be read, or a line is not UTF-8 or not JSON, or (``objects``) not a JSON object."""
    path = Path(path)
    with _reading(path, what), path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            line = decode_line(raw, path, lineno)
            if lineno == 1:
                line = line.removeprefix("\ufeff")  # a byte-order mark some editors write
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}: line {lineno}: not valid JSON ({e.msg})") from None
            if objects and not isinstance(value, dict):
                raise UserError(f"{path}: line {lineno}: expected a JSON object")
            yield lineno, value


def _fsync_dir(path: Path) -> None:
    # Make the rename itself durable; not every platform allows opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _is_special(path: Path) -> bool:
    """An existing file that is neither a regular file nor a directory (a device, a FIFO, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", fsync: bool = True
) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on success fsync and rename it over ``path``, on error delete it.

    ``fsync=False`` skips both fsyncs (file and directory) for files whose loss in a crash is detected and
    repaired later, e.g. through checksums kept in a file that *is* fsynced."""
    path = Path(path)
    if "b" in mode:
        encoding = None
    if _is_special(path):  # /dev/null, a FIFO, a terminal: write into it; a rename would replace it
        with open(path, mode, encoding=encoding) as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        _chmod_as_umask(tmp)
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if fsync:
            _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2, fsync: bool = True) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (``fsync``: as :func:`atomic_write`)."""
    with atomic_write(path, fsync=fsync) as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory beside ``path``; on success it replaces ``path`` (files already there but not
    rewritten are kept), on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent))
    try:
        _chmod_as_umask(tmp, is_dir=True)
        yield tmp
        path.mkdir(parents=True, exist_ok=True)
        for item in tmp.iterdir():
            target = path / item.name
            if target.is_dir() and not item.is_dir():
                shutil.rmtree(target)
            os.replace(item, target)
        _fsync_dir(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def path_inside(base: str | os.PathLike, relative: Any, where: str) -> Path:
    """``base / relative`` for a path read from a file in ``base`` (``modules.json``, a shard index): refused
    with a UserError naming ``where`` when it is absolute, climbs out with ``..``, or leaves ``base`` through a
    symbolic link, so a model folder can only point inside itself."""
    base = Path(base)
    if not isinstance(relative, str):
        raise UserError(f"{where}: path {relative!r} must be a string")
    rel = Path(relative)
    if (
        rel.is_absolute()
        or relative.startswith(("/", "\\"))
        or ".." in rel.parts
        or ".." in relative.split("\\")
    ):
        raise UserError(
            f"{where}: path {relative!r} leaves the folder {base}; only paths inside it are allowed"
        )
    target = base / rel
    try:
        inside = target.resolve().is_relative_to(base.resolve())
    except OSError:
        inside = False
    if not inside:
        raise UserError(f"{where}: path {relative!r} leaves the folder {base} through a link; refused")
    return target


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """The model directory meant by ``path``: ``path`` itself, or ``path/model`` when ``path`` is the output
    directory of a run (``bertkit finetune``/``pretrain`` write the model there) and has no config.json."""
    path = Path(path)
    if path.is_dir() and not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        logger.info("%s holds no model; using the run's model directory %s", path, path / "model")
        return path / "model"
    return path
