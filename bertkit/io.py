"""Atomic file and directory writes (nothing half-written is ever left under the final name), and where a
model directory is."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger("bertkit")


def _fsync_dir(path: Path) -> None:
    # Make the rename itself durable; not every platform allows opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", fsync: bool = True
) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on success fsync and rename it over ``path``, on error delete it.

    ``fsync=False`` skips both fsyncs (file and directory) for files whose loss in a crash is detected and
    repaired later, e.g. through checksums kept in a file that *is* fsynced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    if "b" in mode:
        encoding = None
    try:
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


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` atomically."""
    with atomic_write(path) as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory beside ``path``; on success it replaces ``path`` (files already there but not
    rewritten are kept), on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
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


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """The model directory meant by ``path``: ``path`` itself, or ``path/model`` when ``path`` is the output
    directory of a run (``bertkit finetune``/``pretrain`` write the model there) and has no config.json."""
    path = Path(path)
    if path.is_dir() and not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        logger.info("%s holds no model; using the run's model directory %s", path, path / "model")
        return path / "model"
    return path
