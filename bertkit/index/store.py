"""A persistent vector store: ids and metadata in SQLite, search in a FAISS (or numpy, or Qdrant) backend.

Layout of an index directory::

    store.db            SQLite in WAL mode, synchronous=FULL: the source of truth
                          meta(key, value)                       dim, metric, backend, its parameters
                          items(id, key, vector, metadata)       one row per entry (key = the user's id as JSON)
                          log(seq, op, id)                       every add/delete since the last snapshot
    snapshot-<seq>/     the backend saved after log entry <seq> (a cache; written to a temp dir, then renamed)
    qdrant/             the qdrant backend's own storage
    writer.lock         held (``flock``) by the one process that may write (bertkit.index.lock)

Why it survives a SIGKILL: an ``add`` or ``delete`` is one SQLite transaction that writes the rows and their
log entries together; once it commits it is on disk (WAL + fsync). Opening the store loads the newest
snapshot that reads back and replays the log entries after it; with no usable snapshot it rebuilds the
backend from ``items``. A kill can therefore only lose the batch whose transaction had not committed, and a
half-written snapshot is a temp directory that is ignored (and removed) on the next open.

Why writers take turns: a writer's backend lives in its memory, and its snapshot drops the log entries it
covers, so a second writer's batches committed in between would be in neither. A store opened for writing
holds the folder's writer lock until it is closed; one opened read-only takes no lock and writes nothing.
Opening reads the snapshot position, the log and the rows in one SQLite read transaction (a consistent view
even while a writer commits), and checks that the backend holds as many entries as ``items``; if not (an
index written before writers took turns) it rebuilds the backend from ``items``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..io import _chmod_as_umask, _fsync_dir
from . import lock
from .backends import BACKENDS, Backend, exact_search, make_backend

logger = logging.getLogger("bertkit")

METRICS = ("cosine", "dot")
QUERY_BLOCK = 1024  # queries searched at a time: a backend's work memory is [block x rows of a chunk]
FILTER_CHUNK = 16_384  # stored vectors read at a time by a filtered search: [block x chunk] scores, 64 MB
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, vector BLOB NOT NULL, metadata TEXT);
CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, id INTEGER NOT NULL);
"""


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(str(path), isolation_level=None)  # explicit BEGIN/COMMIT below
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    return con


def _fsync_tree(path: Path) -> None:
    for p in [*path.iterdir(), path]:
        _fsync_dir(p)  # a file or a folder alike


def _checked_meta(text: Any, db: Path) -> dict[str, Any]:
    """The store's metadata row, refused in one line unless it names a dimension, metric and backend."""
    try:
        meta = json.loads(text)
    except (TypeError, ValueError):
        raise UserError(f"{db}: the store metadata is not JSON; the index is damaged: rebuild it") from None
    if not isinstance(meta, dict):
        raise UserError(f"{db}: the store metadata is not a JSON object; rebuild the index")
    dim = meta.get("dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise UserError(f"{db}: the store metadata has no valid 'dim' (got {dim!r}); rebuild the index")
    for key, allowed in (("metric", METRICS), ("backend", BACKENDS)):
        if meta.get(key) not in allowed:
            raise UserError(
                f"{db}: the store metadata names {key} {meta.get(key)!r}; expected one of {', '.join(allowed)}"
            )
    if not isinstance(meta.get("params", {}), dict):
        raise UserError(f"{db}: the store metadata's 'params' is not an object; rebuild the index")
    return meta


class VectorStore:
    """See the module docstring. Create with :meth:`create`, reopen with :meth:`open`."""

    def __init__(
        self, path: Path, con: sqlite3.Connection, meta: dict[str, Any], lock_fd: int | None = None
    ) -> None:
        self.path = path
        self._con = con
        self._lock_fd = lock_fd  # None: opened read-only
        self.meta = meta
        self.dim = int(meta["dim"])
        self.metric = meta["metric"]
        self.kind = meta["backend"]
        self.params: dict[str, Any] = meta.get("params", {})
        self.backend: Backend = self._new_backend()
        self._applied = 0  # the last log seq the in-memory backend reflects

    @property
    def writable(self) -> bool:
        return self._lock_fd is not None

    def _check_writable(self) -> None:
        if not self.writable:
            raise UserError(f"{self.path}: the index was opened read-only")

    # -- creating and opening ---------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        dim: int,
        backend: str = "hnsw",
        metric: str = "cosine",
        overwrite: bool = False,
        extra: dict[str, Any] | None = None,
        lock_timeout: float = 60.0,
        **params: Any,
    ) -> VectorStore:
        """A new empty store at ``path`` (refused if one exists there, unless ``overwrite``).

        ``params`` go to the backend (``M``, ``ef_construction``, ``ef_search``, ``nlist``, ``pq_m``,
        ``nprobe``, ``refine``); ``extra`` is kept in the metadata (e.g. the model that made the vectors)."""
        path = Path(path)
        for what, value, allowed in (("backend", backend, BACKENDS), ("metric", metric, METRICS)):
            if value not in allowed:
                raise UserError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
        if dim < 1:
            raise UserError(f"dimension must be >= 1, got {dim}")
        if (path.is_dir() and any(path.iterdir())) or path.is_file():
            if not overwrite:
                raise UserError(f"{path} already exists; pass --overwrite to replace it")
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        path.mkdir(parents=True, exist_ok=True)
        if backend == "qdrant" and params.get("url"):  # a server: this index's own collection on it
            params.setdefault("collection", f"bertkit-{uuid.uuid4().hex[:12]}")
        meta = {"dim": int(dim), "metric": metric, "backend": backend, "params": params, "format": 1}
        meta.update(extra or {})
        make_backend(backend, dim, path / "qdrant", **params).close()  # validate the parameters early
        shutil.rmtree(path / "qdrant", ignore_errors=True)
        fd = lock.acquire(path, lock_timeout)
        con = _connect(path / "store.db")
        con.executescript(_SCHEMA)
        con.execute("INSERT INTO meta VALUES ('store', ?)", (json.dumps(meta),))
        return cls(path, con, meta, fd)

    @classmethod
    def open(cls, path: str | os.PathLike, write: bool = True, lock_timeout: float = 60.0) -> VectorStore:
        """Reopen a store: newest readable snapshot + the log after it (or a rebuild from the rows).

        ``write``: hold the writer lock (waiting up to ``lock_timeout`` seconds for another writer) so that
        :meth:`add`, :meth:`delete` and :meth:`save` are allowed; without it the store only searches."""
        path = Path(path)
        db = path / "store.db"
        if not db.is_file():
            raise UserError(
                f"{path}: no index here (store.db missing); create one with `bertkit index build`"
            )
        fd = lock.acquire(path, lock_timeout) if write else None
        con = None
        try:
            try:
                con = _connect(db)
                row = con.execute("SELECT value FROM meta WHERE key='store'").fetchone()
            except sqlite3.DatabaseError as e:
                raise UserError(f"{db}: not a bertkit index ({e})") from None
            if row is None:
                raise UserError(f"{db}: no store metadata; rebuild the index")
            store = cls(path, con, _checked_meta(row[0], db), fd)
            try:
                store._recover()
            except sqlite3.DatabaseError as e:  # a damaged page found while reading the rows
                raise UserError(f"{db}: damaged ({e}); rebuild the index") from None
        except BaseException:
            if con is not None:  # closed now: an open connection leaves WAL files behind
                con.close()
            lock.release(fd)
            raise
        return store

    def _new_backend(self) -> Backend:
        return make_backend(self.kind, self.dim, self.path / "qdrant", **self.params)

    def _snapshots(self) -> list[tuple[int, Path]]:
        found = []
        for p in self.path.glob("snapshot-*"):
            with contextlib.suppress(ValueError):
                found.append((int(p.name.split("-", 1)[1]), p))
        return sorted(found, reverse=True)

    def _recover(self) -> None:
        if self.writable:  # a snapshot a crashed writer left half-written (a reader leaves them alone)
            for tmp in self.path.glob(".snapshot-*.tmp"):
                shutil.rmtree(tmp, ignore_errors=True)
        self._con.execute("BEGIN")  # one consistent view of meta, log and items while a writer commits
        try:
            rebuilt = self._load_newest()
            rows = len(self)
            if not rebuilt and len(self.backend) != rows:
                logger.warning(
                    "%s: the backend holds %d entries but the store %d; rebuilding it from the store",
                    self.path,
                    len(self.backend),
                    rows,
                )
                self.rebuild(save=False)
                rebuilt = True
        finally:
            self._con.execute("COMMIT")
        if rebuilt and self.writable and rows:
            self.save()

    def _load_newest(self) -> bool:
        """The newest usable snapshot plus the log after it; False, or True when it had to rebuild."""
        truncated_to = int(self._get("log_truncated_to", 0))
        for seq, snap in self._snapshots():
            if seq < truncated_to:  # entries after this snapshot were dropped from the log: unusable
                break
            try:
                if not self.backend.persistent:
                    self.backend.load(snap / "index.bin")
            except Exception as e:  # noqa: BLE001 - any unreadable snapshot: try an older one
                logger.warning("%s: snapshot unreadable (%s); trying an older one", snap, e)
                self.backend = self._new_backend()
                continue
            self._applied = seq
            self._replay(seq)
            return False
        self.rebuild(save=False)
        return True

    def _replay(self, after: int) -> None:
        ops = self._con.execute("SELECT seq, op, id FROM log WHERE seq > ? ORDER BY seq", (after,)).fetchall()
        never_added: set[int] = set()  # added then deleted after the snapshot: the backend never held them
        for op, run in itertools.groupby(ops, key=lambda r: r[1]):  # consecutive adds: one backend batch
            run = list(run)
            ids = [r[2] for r in run]
            if op == "add":
                got_ids, vecs = self._vectors_of(ids)
                never_added.update(set(ids) - set(got_ids.tolist()))
                if len(got_ids):
                    self._ensure_trained()
                    self._to_backend(got_ids, vecs)
            else:
                # removing an id the backend never held would count a tombstone for nothing
                gone = [r for r in ids if r not in never_added]
                if gone:
                    self.backend.remove(np.asarray(gone, dtype=np.int64))
            self._applied = run[-1][0]

    def _vector(self, row: int, blob: Any) -> np.ndarray:
        """One stored vector, refused in one line when the file holds something else (a damaged store)."""
        if not isinstance(blob, bytes) or len(blob) != 4 * self.dim:
            size = len(blob) if isinstance(blob, bytes) else type(blob).__name__
            raise UserError(
                f"{self.path / 'store.db'}: row {row} holds a vector of {size} bytes, expected {4 * self.dim} "
                f"(dimension {self.dim}); the index is damaged: rebuild it"
            )
        return np.frombuffer(blob, dtype=np.float32)

    def _items(self, columns: str, ids: Sequence[int], order: str = "") -> Iterable[tuple]:
        """``SELECT id, columns`` of the ``items`` rows whose id is in ``ids``, read in chunks."""
        for start in range(0, len(ids), 900):  # SQLite's bound-parameter limit
            chunk = [int(r) for r in ids[start : start + 900]]
            q = f"SELECT id, {columns} FROM items WHERE id IN ({','.join('?' * len(chunk))}){order}"
            yield from self._con.execute(q, chunk)

    def _vectors_of(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        got_ids, vecs = [], []
        for i, blob in self._items("vector", ids, " ORDER BY id"):
            got_ids.append(i)
            vecs.append(self._vector(i, blob))
        if not got_ids:
            return np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32)
        return np.asarray(got_ids, dtype=np.int64), np.stack(vecs)

    def _keys_and_metadata(self, rows: Sequence[int]) -> dict[int, tuple[Any, Any]]:
        """row -> (the user's id, metadata) of the rows still stored."""
        found: dict[int, tuple[Any, Any]] = {}
        for i, key, meta in self._items("key, metadata", rows):
            try:
                found[i] = (json.loads(key), None if meta is None else json.loads(meta))
            except (TypeError, ValueError):
                raise UserError(
                    f"{self.path / 'store.db'}: row {i} holds an id or metadata that is not JSON; "
                    "the index is damaged: rebuild it"
                ) from None
        return found

    def _to_backend(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Hand stored entries to the backend; one that keeps payloads (qdrant) gets each entry's
        ``{"id", "metadata"}`` with it, so a user of that database sees them, not bare row numbers."""
        if self.backend.wants_payloads:
            found = self._keys_and_metadata(rows)
            payloads = [{"id": found[int(r)][0], "metadata": found[int(r)][1]} for r in rows]
            self.backend.add(rows, vectors, payloads=payloads)
        else:
            self.backend.add(rows, vectors)

    def _get(self, key: str, default: Any = None) -> Any:
        row = self._con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def _put(self, key: str, value: Any) -> None:
        self._con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed when the block ends, rolled back when it raises."""
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield self._con
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise

    # -- the backend ---------------------------------------------------------------------------------------
    def _ensure_trained(self, first: np.ndarray | None = None) -> None:
        """IVF-PQ learns its cells and codebooks from the rows present (or ``first``, the batch being
        added to an empty store). Training uses at most ``train_size`` rows, taken in id order."""
        if self.backend.is_trained:
            return
        nlist = int(self.params.get("nlist", 1024))
        limit = int(self.params.get("train_size", max(100_000, 50 * nlist)))
        rows = self._con.execute("SELECT id, vector FROM items ORDER BY id LIMIT ?", (limit,)).fetchall()
        sample = np.stack([self._vector(i, blob) for i, blob in rows]) if rows else first
        if sample is None or len(sample) < 39 * nlist:
            n = 0 if sample is None else len(sample)
            raise UserError(
                f"an ivfpq index with nlist={nlist} needs at least {39 * nlist} vectors to train on, got {n}; "
                f"build it with --nlist {max(1, n // 39)} or fewer, or use --backend hnsw"
            )
        self.backend.train(sample[:limit])

    def rebuild(self, save: bool = True) -> None:
        """A fresh backend filled from ``items`` (the tombstones are gone afterwards), then a snapshot
        (``save``, and only when opened for writing)."""
        if self.backend.persistent:
            self.backend.close()
            shutil.rmtree(self.path / "qdrant", ignore_errors=True)
        self.backend = self._new_backend()
        last = self._con.execute("SELECT MAX(seq) FROM log").fetchone()[0] or 0
        last = max(last, int(self._get("log_truncated_to", 0)))
        ids = [r[0] for r in self._con.execute("SELECT id FROM items ORDER BY id")]
        if ids:
            self._ensure_trained()
        for start in range(0, len(ids), 50_000):
            got, vecs = self._vectors_of(ids[start : start + 50_000])
            self._to_backend(got, vecs)
        self._applied = last
        if ids and save and self.writable:
            self.save()

    # -- writing ---------------------------------------------------------------------------------------------
    def _prep(self, vectors: np.ndarray) -> np.ndarray:
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise UserError(f"expected vectors of dimension {self.dim}, got shape {tuple(x.shape)}")
        if not np.isfinite(x).all():
            raise UserError("vectors contain NaN or infinity")
        if self.metric == "cosine":
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(x)

    def add(self, vectors: np.ndarray, ids: Sequence[Any], metadata: Sequence[Any] | None = None) -> int:
        """Add entries ``ids[i]`` (any JSON value, unique in the store) with ``vectors[i]`` [N, D] and
        ``metadata[i]`` (any JSON value). All or nothing: one transaction. Returns the number added."""
        self._check_writable()
        x = self._prep(vectors)
        if len(ids) != len(x) or (metadata is not None and len(metadata) != len(x)):
            raise UserError(f"got {len(x)} vectors, {len(ids)} ids and {len(metadata or ids)} metadata")
        keys = [json.dumps(i, sort_keys=True) for i in ids]
        if len(set(keys)) != len(keys):
            raise UserError("the same id appears twice in one batch")
        if len(x) == 0:
            return 0
        self._ensure_trained(first=x)
        rows = []
        with self._transaction() as con:
            for i, key in enumerate(keys):
                meta = None if metadata is None else json.dumps(metadata[i], ensure_ascii=False)
                try:
                    cur = con.execute(
                        "INSERT INTO items (key, vector, metadata) VALUES (?, ?, ?)",
                        (key, x[i].tobytes(), meta),
                    )
                except sqlite3.IntegrityError:
                    raise UserError(f"id {key} is already in the index; delete it first") from None
                rows.append(cur.lastrowid)
            con.executemany("INSERT INTO log (op, id) VALUES ('add', ?)", [(r,) for r in rows])
            seq = con.execute("SELECT MAX(seq) FROM log").fetchone()[0]
            numbers = [i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i >= 0]
            if numbers:  # remembered past deletes: running numbers are never handed out twice
                self._put("next_auto_id", max(int(self._get("next_auto_id", 0)), max(numbers) + 1))
        self._to_backend(np.asarray(rows, dtype=np.int64), x)
        self._applied = seq
        return len(rows)

    def next_auto_id(self) -> int:
        """The first running number (an id for inputs that bring none) above every integer id this store
        has held, deleted ones included."""
        present = self._con.execute(
            "SELECT MAX(CAST(key AS INTEGER)) FROM items WHERE key GLOB '[0-9]*' AND key NOT GLOB '*[^0-9]*'"
        ).fetchone()[0]
        return max(int(self._get("next_auto_id", 0)), -1 if present is None else int(present) + 1, 0)

    def delete(self, ids: Iterable[Any]) -> list[Any]:
        """Delete entries by the user's ids; returns the ids that were not in the store."""
        self._check_writable()
        missing, rows = [], []
        with self._transaction() as con:
            for i in ids:
                r = con.execute(
                    "SELECT id FROM items WHERE key=?", (json.dumps(i, sort_keys=True),)
                ).fetchone()
                if r is None:
                    missing.append(i)
                    continue
                rows.append(r[0])
                con.execute("DELETE FROM items WHERE id=?", (r[0],))
            con.executemany("INSERT INTO log (op, id) VALUES ('del', ?)", [(r,) for r in rows])
            seq = con.execute("SELECT MAX(seq) FROM log").fetchone()[0]
        if rows:
            self.backend.remove(np.asarray(rows, dtype=np.int64))
            self._applied = seq
            dead = len(getattr(self.backend, "tombstones", ()))
            if dead > max(1000, len(self) // 10):
                self.rebuild()
        return missing

    def save(self) -> Path | None:
        """Snapshot the backend at the current log position and drop the log entries it covers."""
        self._check_writable()
        if self.backend.persistent:
            snap = self.path / f"snapshot-{self._applied}"
            snap.mkdir(exist_ok=True)
        else:
            tmp = Path(tempfile.mkdtemp(prefix=".snapshot-", suffix=".tmp", dir=self.path))
            _chmod_as_umask(tmp, is_dir=True)  # mkdtemp makes it 0700 whatever the umask
            try:
                self.backend.save(tmp / "index.bin")
                _fsync_tree(tmp)
                snap = self.path / f"snapshot-{self._applied}"
                if snap.exists():
                    shutil.rmtree(snap)
                os.replace(tmp, snap)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        _fsync_tree(self.path)
        for seq, old in self._snapshots():
            if seq != self._applied:
                shutil.rmtree(old, ignore_errors=True)
        with self._transaction() as con:
            con.execute("DELETE FROM log WHERE seq <= ?", (self._applied,))
            self._put("log_truncated_to", self._applied)
        return snap

    def close(self) -> None:
        self.backend.close()
        self._con.close()
        lock.release(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> VectorStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._con.execute("SELECT COUNT(*) FROM items").fetchone()[0])

    def search(
        self, queries: np.ndarray, k: int = 10, where: dict[str, Any] | None = None
    ) -> list[list[dict[str, Any]]]:
        """Top-``k`` per query row: ``[{"id", "score", "metadata"}, ...]`` best first.

        ``where``: only entries whose metadata is an object holding each key with an equal JSON value
        (``{"lang": "en", "year": 2020}``). A filtered search is exact, whatever the backend: it scores
        the query against every matching entry's stored vector (cost: matches x queries), so it never
        returns fewer than ``k`` hits while ``k`` entries match, as over-fetching an ANN index could."""
        if k < 1:
            raise UserError(f"k must be >= 1, got {k}")
        q = self._prep(np.atleast_2d(queries))
        search = self.backend.search if where is None else partial(self._exact_among, self._matching(where))
        # in blocks: 20,000 queries at once held a [queries x chunk] score matrix of over 3 GB
        parts = [search(q[s : s + QUERY_BLOCK], k) for s in range(0, len(q), QUERY_BLOCK)]
        scores = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, k), np.float32)
        rows = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, k), np.int64)
        wanted = sorted({int(r) for r in rows.ravel() if r >= 0})
        info = self._keys_and_metadata(wanted)
        out = []
        for s_row, r_row in zip(scores, rows):
            hits = []
            for s, r in zip(s_row, r_row):
                if r >= 0 and int(r) in info:  # a row deleted by another process is skipped
                    key, meta = info[int(r)]
                    hits.append({"id": key, "score": float(s), "metadata": meta})
            out.append(hits)
        return out

    def _matching(self, where: dict[str, Any]) -> np.ndarray:
        """Row ids (ascending) of the entries ``where`` selects (see :meth:`search`)."""
        if not isinstance(where, dict) or not all(isinstance(key, str) for key in where):
            raise UserError(f"a metadata filter maps field names to values, got {where!r}")
        # compared as canonical JSON: 1, 1.0 and true are three different values, as in the file
        want = {key: json.dumps(v, sort_keys=True) for key, v in where.items()}
        out = []
        for i, meta in self._con.execute("SELECT id, metadata FROM items WHERE metadata IS NOT NULL"):
            try:
                m = json.loads(meta)
            except (TypeError, ValueError):
                raise UserError(
                    f"{self.path / 'store.db'}: row {i} holds metadata that is not JSON; "
                    "the index is damaged: rebuild it"
                ) from None
            if isinstance(m, dict) and all(
                key in m and json.dumps(m[key], sort_keys=True) == v for key, v in want.items()
            ):
                out.append(i)
        return np.asarray(sorted(out), dtype=np.int64)

    def _exact_among(self, rows: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores [Q, k], row ids [Q, k]) of ``q`` (prepared) against the stored vectors of ``rows`` only,
        read ``FILTER_CHUNK`` rows at a time; missing slots get id -1, as the backends give them."""
        best_s = np.full((len(q), k), -np.inf, np.float32)
        best_i = np.full((len(q), k), -1, np.int64)
        for start in range(0, len(rows), FILTER_CHUNK):
            got, vecs = self._vectors_of([int(r) for r in rows[start : start + FILTER_CHUNK]])
            s, i = exact_search(vecs, q, k, got)
            all_s, all_i = np.concatenate([best_s, s], axis=1), np.concatenate([best_i, i], axis=1)
            order = np.lexsort((all_i, -all_s), axis=1)[:, :k]  # ties: the lower row id first
            best_s = np.take_along_axis(all_s, order, axis=1)
            best_i = np.take_along_axis(all_i, order, axis=1)
        return best_s, best_i

    def info(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "entries": len(self),
            "dim": self.dim,
            "metric": self.metric,
            "backend": self.kind,
            "params": self.params,
            **{k: v for k, v in self.meta.items() if k not in ("dim", "metric", "backend", "params")},
        }
