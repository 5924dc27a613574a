"""Vector search: a persistent store (``VectorStore``: SQLite for ids, metadata and a write-ahead log;
FAISS flat / HNSW / IVF-PQ, exact numpy or Qdrant for the search) and ``exact_search``, the reference."""

from .backends import BACKENDS, Backend, exact_search, make_backend
from .store import METRICS, VectorStore

__all__ = ["BACKENDS", "METRICS", "Backend", "VectorStore", "exact_search", "make_backend"]
