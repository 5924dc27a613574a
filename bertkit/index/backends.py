"""Search structures behind :class:`bertkit.index.VectorStore`: each maps int64 ids to vectors.

- ``exact``  numpy brute force, in memory (the reference every other backend is checked against; also the
  exact index of evaluations, alone or through :func:`exact_search`);
- ``flat``   FAISS ``IndexFlatIP`` (exact, BLAS);
- ``hnsw``   FAISS ``IndexHNSWFlat`` (graph; ``M`` links per node, ``ef_search`` candidates per query);
- ``ivfpq``  FAISS ``IndexIVFPQ`` (``nlist`` k-means cells, vectors compressed to ``pq_m`` bytes), with an
  exact re-scoring of the ``refine`` x k best candidates against the stored vectors (``refine=0``: off);
- ``qdrant`` Qdrant through ``qdrant-client`` in its local (embedded) mode: the engine users grow into.

Scores are inner products; the store normalises vectors first for ``metric="cosine"``. A backend never
persists ids or metadata: the store's SQLite log is the source of truth and a backend snapshot is a cache
that is rebuilt or caught up from the log (see ``store.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

BACKENDS = ("exact", "flat", "hnsw", "ivfpq", "qdrant")


def _faiss():
    try:
        import faiss
    except ImportError:
        from ..errors import UserError

        raise UserError(
            "this index type needs FAISS: pip install faiss-cpu (or use --backend exact)"
        ) from None
    return faiss


class Backend:
    """Interface: ``add(ids [N] int64, vectors [N, D] float32)``, ``remove(ids)``,
    ``search(queries [Q, D], k) -> (scores [Q, k], ids [Q, k])`` with id -1 (score -inf) where fewer than
    ``k`` exist, ``save(path)`` / ``load(path)``, ``needs_training`` and ``train(vectors)``."""

    name = "?"
    needs_training = False
    persistent = False  # True: it keeps its own durable copy (qdrant), never saved or loaded by the store
    wants_payloads = False  # True: add() also takes each entry's {"id", "metadata"} (qdrant's payloads)

    def __init__(self, dim: int, **params: Any) -> None:
        self.dim = int(dim)
        self.params = params

    def train(self, vectors: np.ndarray) -> None:  # pragma: no cover - only ivfpq trains
        pass

    @property
    def is_trained(self) -> bool:
        return True

    def __len__(self) -> int:
        raise NotImplementedError

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        raise NotImplementedError

    def remove(self, ids: np.ndarray) -> None:
        raise NotImplementedError

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        raise NotImplementedError

    def load(self, path: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ExactBackend(Backend):
    """Brute-force inner products in numpy: [Q, D] x [N, D]^T, then a partial sort per row."""

    name = "exact"

    def __init__(self, dim: int, **params: Any) -> None:
        super().__init__(dim, **params)
        self._ids = np.zeros(0, dtype=np.int64)
        self._vecs = np.zeros((0, self.dim), dtype=np.float32)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def _flush(self) -> None:
        if self._pending:
            self._ids = np.concatenate([self._ids, *(i for i, _ in self._pending)])
            self._vecs = np.concatenate([self._vecs, *(v for _, v in self._pending)])
            self._pending = []

    def __len__(self) -> int:
        return len(self._ids) + sum(len(i) for i, _ in self._pending)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or len(vectors) != len(ids):
            raise ValueError(
                f"expected {len(ids)} vectors of dimension {self.dim}, got shape {vectors.shape}"
            )
        self._pending.append((np.asarray(ids, dtype=np.int64), vectors))

    def remove(self, ids: np.ndarray) -> None:
        self._flush()
        keep = ~np.isin(self._ids, np.asarray(ids, dtype=np.int64))
        self._ids, self._vecs = self._ids[keep], self._vecs[keep]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._flush()
        return exact_search(self._vecs, queries, k, self._ids)

    def save(self, path: Path) -> None:
        self._flush()
        with open(path, "wb") as f:
            np.savez(f, ids=self._ids, vectors=self._vecs)

    def load(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as d:
            self._ids, self._vecs = d["ids"].astype(np.int64), d["vectors"].astype(np.float32)
        self._pending = []


def exact_search(
    base: np.ndarray, queries: np.ndarray, k: int, ids: np.ndarray | None = None, chunk: int = 65536
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` inner products of each query row against ``base`` [N, D] -> (scores [Q, k], ids [Q, k]).

    Rows are scanned ``chunk`` at a time so a million-row base never needs a [Q, N] score matrix at once;
    missing slots (k > N) get id -1 and score -inf. Ties keep the lower position first.
    """
    q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    best_s = np.full((len(q), k), -np.inf, dtype=np.float32)
    best_i = np.full((len(q), k), -1, dtype=np.int64)
    if k == 0:
        return best_s, best_i
    for start in range(0, len(base), chunk):
        s = q @ base[start : start + chunk].T  # [Q, C]
        pos = np.arange(start, start + s.shape[1], dtype=np.int64)
        all_s = np.concatenate([best_s, s], axis=1)
        all_i = np.concatenate([best_i, np.broadcast_to(pos, s.shape)], axis=1)
        kk = min(k, all_s.shape[1])
        part = np.argpartition(-all_s, kk - 1, axis=1)[:, :kk]
        best_s = np.take_along_axis(all_s, part, axis=1)
        best_i = np.take_along_axis(all_i, part, axis=1)
    order = np.lexsort((best_i, -best_s), axis=1) if best_s.size else np.zeros_like(best_i)
    best_s = np.take_along_axis(best_s, order, axis=1)
    best_i = np.take_along_axis(best_i, order, axis=1)
    if ids is not None:
        mapped = np.where(best_i >= 0, ids[np.clip(best_i, 0, None)] if len(ids) else -1, -1)
        best_i = mapped.astype(np.int64)
    return best_s, best_i


class FaissBackend(Backend):
    """One FAISS index inside an ``IndexIDMap2`` (our int64 ids over FAISS's positions).

    Deletes: the flat index drops rows (``remove_ids``); an HNSW graph and a refined IVF-PQ cannot, so their
    deleted ids become *tombstones*, filtered at search time (HNSW: an ``IDSelectorNot`` inside the graph
    walk; IVF-PQ: over-fetch ``k + len(tombstones)`` and drop them). The store rebuilds the index from its log
    when tombstones pass a tenth of the rows (``VectorStore.rebuild``)."""

    def __init__(self, dim: int, kind: str, **params: Any) -> None:
        super().__init__(dim, **params)
        faiss = _faiss()
        self.name = kind
        self.tombstones: set[int] = set()
        if kind == "flat":
            inner = faiss.IndexFlatIP(self.dim)
        elif kind == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dim, int(params.get("M", 32)), faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = int(params.get("ef_construction", 80))
        elif kind == "ivfpq":
            nlist, m = int(params.get("nlist", 1024)), int(params.get("pq_m", 48))
            if self.dim % m:
                raise ValueError(f"pq_m={m} must divide the dimension {self.dim}")
            inner = faiss.IndexIVFPQ(
                faiss.IndexFlatIP(self.dim), self.dim, nlist, m, 8, faiss.METRIC_INNER_PRODUCT
            )
            self.needs_training = True
            refine = float(params.get("refine", 4))
            if refine:  # exact re-scoring of refine*k candidates needs the raw vectors beside the codes
                inner = faiss.IndexRefineFlat(inner)
                inner.k_factor = refine
        else:
            raise ValueError(f"unknown FAISS index kind {kind!r}")
        self.index = faiss.IndexIDMap2(inner)
        self._apply_search_params()

    def _apply_search_params(self) -> None:
        faiss = _faiss()
        core = faiss.downcast_index(self.index.index)  # the HNSW / IVF index under the id map
        if isinstance(core, faiss.IndexRefine):  # and under the refine wrapper
            core = faiss.downcast_index(core.base_index)
        if self.name == "hnsw":
            core.hnsw.efSearch = int(self.params.get("ef_search", 64))
        elif self.name == "ivfpq":
            core.nprobe = int(self.params.get("nprobe", 32))

    @property
    def is_trained(self) -> bool:
        return bool(self.index.is_trained)

    def train(self, vectors: np.ndarray) -> None:
        self.index.train(np.ascontiguousarray(vectors, dtype=np.float32))

    def __len__(self) -> int:
        return int(self.index.ntotal) - len(self.tombstones)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.tombstones.difference_update(int(i) for i in ids)
        self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)

    def remove(self, ids: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if self.name == "flat":
            self.index.remove_ids(_faiss().IDSelectorBatch(ids))
        else:
            self.tombstones.update(int(i) for i in ids)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        faiss = _faiss()
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if self.index.ntotal == 0 or k == 0:
            return np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64)
        if self.tombstones and self.name == "hnsw":
            sel = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.fromiter(self.tombstones, dtype=np.int64)))
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=int(self.params.get("ef_search", 64)))
            scores, ids = self.index.search(q, k, params=params)
        elif self.tombstones:  # over-fetch, then each row's first k alive (rows come sorted best first)
            got_s, got_i = self.index.search(q, min(k + len(self.tombstones), int(self.index.ntotal)))
            alive = ~np.isin(got_i, np.fromiter(self.tombstones, dtype=np.int64)) & (got_i >= 0)
            scores, ids = np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64)
            for r in range(len(q)):
                s, i = got_s[r][alive[r]][:k], got_i[r][alive[r]][:k]
                scores[r, : len(s)], ids[r, : len(i)] = s, i
        else:
            scores, ids = self.index.search(q, k)
        scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
        return scores, ids.astype(np.int64)

    def save(self, path: Path) -> None:
        _faiss().write_index(self.index, str(path))
        np.save(str(path) + ".dead.npy", np.fromiter(sorted(self.tombstones), dtype=np.int64))

    def load(self, path: Path) -> None:
        self.index = _faiss().read_index(str(path))
        self.tombstones = set(np.load(str(path) + ".dead.npy", allow_pickle=False).tolist())
        self._apply_search_params()


class QdrantBackend(Backend):
    """Qdrant in local mode (``QdrantClient(path=...)``), or a Qdrant server (``params["url"]``) where the
    index's points live in its own collection (``params["collection"]``, fixed when the index is created), so
    several indexes share one server. Qdrant persists its points itself."""

    name = "qdrant"
    persistent = True
    wants_payloads = True

    def __init__(self, dim: int, path: str | os.PathLike | None = None, **params: Any) -> None:
        super().__init__(dim, **params)
        try:
            from qdrant_client import QdrantClient, models
        except ImportError:
            from ..errors import UserError

            raise UserError("the qdrant backend needs qdrant-client: pip install qdrant-client") from None
        self._models = models
        url = params.get("url")
        self.collection = str(params.get("collection", "bertkit"))  # local mode: one index per folder
        self.client = QdrantClient(url=url) if url else QdrantClient(path=str(path))
        if not self.client.collection_exists(self.collection):
            self.client.create_collection(
                self.collection,
                vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.DOT),
            )

    def __len__(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def add(self, ids: np.ndarray, vectors: np.ndarray, payloads: list[dict] | None = None) -> None:
        """Points keyed by the store's row ids; ``payloads``: each entry's ``{"id", "metadata"}`` (the
        user's id and metadata, so Qdrant's own tools and filters see them)."""
        m = self._models
        for start in range(0, len(ids), 1024):
            self.client.upsert(
                self.collection,
                points=m.Batch(
                    ids=[int(i) for i in ids[start : start + 1024]],
                    vectors=np.asarray(vectors[start : start + 1024], dtype=np.float32).tolist(),
                    payloads=None if payloads is None else payloads[start : start + 1024],
                ),
            )

    def remove(self, ids: np.ndarray) -> None:
        self.client.delete(
            self.collection, points_selector=self._models.PointIdsList(points=[int(i) for i in ids])
        )

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        scores = np.full((len(q), k), -np.inf, np.float32)
        ids = np.full((len(q), k), -1, np.int64)
        for row, vec in enumerate(q):
            hits = self.client.query_points(self.collection, query=vec.tolist(), limit=k).points
            for j, h in enumerate(hits):
                scores[row, j], ids[row, j] = h.score, int(h.id)
        return scores, ids

    def close(self) -> None:
        self.client.close()


def make_backend(kind: str, dim: int, path: Path | None = None, **params: Any) -> Backend:
    """A backend by name (see :data:`BACKENDS`); ``path`` is qdrant's storage folder."""
    if kind == "exact":
        return ExactBackend(dim, **params)
    if kind in ("flat", "hnsw", "ivfpq"):
        return FaissBackend(dim, kind, **params)
    if kind == "qdrant":
        return QdrantBackend(dim, path=path, **params)
    raise ValueError(f"unknown backend {kind!r}; choose one of {BACKENDS}")
