"""``bertkit index build|add|search|delete|info``: the persistent vector store (bertkit.index).

Input (``--input``): ``.npy`` (float32 [N, D]; ids are running numbers after the entries already there) or
``.jsonl`` with one object per line: ``id`` (any JSON value; default the running number), either
``vector`` (a list of numbers) or ``text`` (embedded with ``--model``, default the index's model), and
optional ``metadata`` (any JSON; the ``text`` is kept in it too). Entries are committed ``--batch-size`` at
a time: an interrupted ``add`` keeps every batch it finished.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..io import read_jsonl
from . import args as A


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "index",
        help="persistent vector index: build, add, search, delete, info",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def lock_timeout(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--lock-timeout",
            type=A.non_negative_float,
            default=60.0,
            metavar="S",
            help="seconds to wait while another process writes to the index (default 60)",
        )

    def common(q: argparse.ArgumentParser, needs_input: bool) -> None:
        q.add_argument("index_dir", type=Path, metavar="INDEX_DIR")
        if needs_input:
            q.add_argument("--input", type=Path, required=True, metavar="F", help=".jsonl or .npy")
        q.add_argument("--model", type=Path, default=None, help="sentence encoder for text inputs")
        q.add_argument("--text-field", default="text", help="the field holding a row's text (default text)")
        what = "entries per commit" if needs_input else "queries read and embedded at a time"
        q.add_argument("--batch-size", type=A.positive_int, default=1000, help=f"{what} (default 1000)")

    b = sub.add_parser("build", help="create an index from an input file", description=__doc__)
    common(b, True)
    b.add_argument("--backend", default="hnsw", choices=("exact", "flat", "hnsw", "ivfpq", "qdrant"))
    b.add_argument("--metric", default="cosine", choices=("cosine", "dot"))
    b.add_argument("--M", type=A.positive_int, default=32, help="hnsw: links per node")
    b.add_argument("--ef-construction", type=A.positive_int, default=80, help="hnsw: build candidates")
    b.add_argument("--ef-search", type=A.positive_int, default=64, help="hnsw: search candidates")
    b.add_argument("--nlist", type=A.positive_int, default=1024, help="ivfpq: k-means cells")
    b.add_argument(
        "--pq-m", type=A.positive_int, default=48, help="ivfpq: bytes per vector (divides the dim)"
    )
    b.add_argument("--nprobe", type=A.positive_int, default=32, help="ivfpq: cells visited per query")
    b.add_argument(
        "--refine", type=A.non_negative_float, default=4.0, help="ivfpq: re-score refine*k exactly (0: off)"
    )
    b.add_argument(
        "--qdrant-url",
        type=_qdrant_url,
        default=None,
        metavar="URL",
        help="qdrant: a Qdrant server (http://host:6333) holding the vectors, in a collection of this index's own",
    )
    b.add_argument("--overwrite", action="store_true", help="replace an existing index")
    lock_timeout(b)
    b.set_defaults(func=build)

    a = sub.add_parser("add", help="add entries (committed batch by batch)")
    common(a, True)
    lock_timeout(a)
    a.set_defaults(func=add)

    s = sub.add_parser("search", help="nearest entries of each query")
    common(s, False)
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--query", action="append", default=None, help="a query text (repeatable)")
    src.add_argument("--queries", type=Path, default=None, metavar="F", help="queries as .jsonl or .npy")
    s.add_argument("-k", type=A.positive_int, default=10)
    s.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only entries whose metadata has KEY equal to VALUE (parsed as JSON when it parses: "
        "year=2020, lang=en, draft=false); repeat to require several; a filtered search is exact",
    )
    A.add_output(
        s,
        "--out",
        kind="file",
        required=False,
        type=Path,
        default=None,
        metavar="F.jsonl",
        help="write hits here",
    )
    s.set_defaults(func=search)

    d = sub.add_parser("delete", help="delete entries by id")
    d.add_argument("index_dir", type=Path, metavar="INDEX_DIR")
    d.add_argument("--ids", nargs="+", required=True, help='ids (parsed as JSON when they parse: 7, "a")')
    lock_timeout(d)
    d.set_defaults(func=delete)

    i = sub.add_parser("info", help="entries, dimension, backend and parameters")
    i.add_argument("index_dir", type=Path, metavar="INDEX_DIR")
    i.set_defaults(func=info)


class _Embedder:
    """Texts -> vectors with a SentenceEncoder loaded on first use."""

    def __init__(self, model: Path | None) -> None:
        self.model_dir = model
        self._enc = None

    def __call__(self, texts: list[str], where: str) -> np.ndarray:
        if self.model_dir is None:
            raise UserError(f"{where}: text inputs need --model (a sentence encoder directory)")
        if self._enc is None:
            from ..sentence.encoder import SentenceEncoder

            self._enc = SentenceEncoder.from_pretrained(self.model_dir)
        return self._enc.encode(texts, batch_size=64)


def _read_batches(
    path: Path, batch_size: int, text_field: str, embed: _Embedder, start_id: int
) -> Iterator[tuple[np.ndarray, list[Any], list[Any]]]:
    """(vectors [n, D], ids, metadata) batches of an input file."""
    if not path.is_file():
        raise UserError(f"{path}: input file not found")
    if path.suffix == ".npy":
        try:
            x = np.load(path, allow_pickle=False, mmap_mode="r")
        except ValueError as e:
            raise UserError(f"{path}: not a numpy array file ({e})") from None
        if x.ndim != 2:
            raise UserError(f"{path}: expected a 2-D array [N, D], got shape {x.shape}")
        for s in range(0, len(x), batch_size):
            n = min(batch_size, len(x) - s)
            yield (
                np.asarray(x[s : s + n], dtype=np.float32),
                list(range(start_id + s, start_id + s + n)),
                [None] * n,
            )
        return
    if path.suffix != ".jsonl":
        raise UserError(f"{path}: input must be .jsonl or .npy")
    rows: list[tuple[int, dict]] = []
    count = start_id

    def flush() -> tuple[np.ndarray, list[Any], list[Any]]:
        texts = [(n, r) for n, r in rows if "vector" not in r]
        vecs: list[Any] = [r.get("vector") for _, r in rows]
        if texts:
            emb = embed([r[text_field] for _, r in texts], f"{path}: line {texts[0][0]}")
            j = 0
            for i, (_, r) in enumerate(rows):
                if "vector" not in r:
                    vecs[i] = emb[j]
                    j += 1
        try:
            x = np.asarray(vecs, dtype=np.float32)
        except ValueError:
            raise UserError(
                f"{path}: lines {rows[0][0]}-{rows[-1][0]}: vectors of different lengths"
            ) from None
        ids = [r["id"] for _, r in rows]
        meta = [_metadata(r, text_field) for _, r in rows]
        return x, ids, meta

    for lineno, obj in read_jsonl(path, "input file"):
        if not isinstance(obj, dict) or not (
            isinstance(obj.get("vector"), list) or isinstance(obj.get(text_field), str)
        ):
            raise UserError(
                f"{path}: line {lineno}: expected an object with a 'vector' list or a string "
                f"{text_field!r} field"
            )
        obj.setdefault("id", count)
        count += 1
        rows.append((lineno, obj))
        if len(rows) == batch_size:
            yield flush()
            rows = []
    if rows:
        yield flush()


def _metadata(row: dict, text_field: str) -> Any:
    meta = row.get("metadata")
    if isinstance(row.get(text_field), str):
        meta = dict(meta) if isinstance(meta, dict) else ({} if meta is None else {"metadata": meta})
        meta.setdefault("text", row[text_field])
    return meta


def _qdrant_url(text: str) -> str:
    """An http(s)://host[:port] address, checked before anything is read or embedded."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected http://host:port or https://host:port, got {text!r}")
    return text


def build(args: argparse.Namespace) -> dict[str, Any]:
    from ..index import VectorStore

    if args.qdrant_url and args.backend != "qdrant":
        raise UserError(f"--qdrant-url needs --backend qdrant (got --backend {args.backend})")
    embed = _Embedder(args.model)
    batches = _read_batches(args.input, args.batch_size, args.text_field, embed, 0)
    first = next(batches, None)
    if first is None:
        raise UserError(f"{args.input}: no entries")
    params: dict[str, Any] = {}
    if args.backend == "hnsw":
        params = {"M": args.M, "ef_construction": args.ef_construction, "ef_search": args.ef_search}
    elif args.backend == "ivfpq":
        params = {"nlist": args.nlist, "pq_m": args.pq_m, "nprobe": args.nprobe, "refine": args.refine}
    elif args.qdrant_url:
        params = {"url": args.qdrant_url}
    extra = {"model": str(args.model.resolve())} if args.model else {}
    t0 = time.perf_counter()
    # claimed as other outputs are: a failed build leaves no folder, a failed --overwrite the old index
    with A.claim_output(args.index_dir, flag="INDEX_DIR", overwrite=args.overwrite) as out:
        store = VectorStore.create(
            out, first[0].shape[1], args.backend, args.metric, False, extra, args.lock_timeout, **params
        )
        with store:
            if args.backend == "ivfpq":  # train on the whole input (up to train_size) rather than one batch
                rest = list(batches)
                x = np.concatenate([first[0], *(b[0] for b in rest)])
                ids = first[1] + [i for b in rest for i in b[1]]
                meta = first[2] + [m for b in rest for m in b[2]]
                store.add(x, ids, meta)
            else:
                store.add(*first)
                for batch in batches:
                    store.add(*batch)
            store.save()
            return {**store.info(), "seconds": round(time.perf_counter() - t0, 3)}


def add(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    from ..index import VectorStore

    with VectorStore.open(args.index_dir, lock_timeout=args.lock_timeout) as store:
        model = args.model or (Path(store.meta["model"]) if store.meta.get("model") else None)
        embed = _Embedder(model)
        t0 = time.perf_counter()
        added = 0
        with tqdm(desc="index add", unit="entry", file=sys.stderr, disable=None) as bar:
            start = store.next_auto_id()
            for x, ids, meta in _read_batches(args.input, args.batch_size, args.text_field, embed, start):
                added += store.add(x, ids, meta)
                bar.update(len(ids))
        store.save()
        return {
            "index": str(args.index_dir),
            "added": added,
            "entries": len(store),
            "seconds": round(time.perf_counter() - t0, 3),
        }


def _parse_filters(items: list[str]) -> dict[str, Any] | None:
    """``["lang=en", "year=2020"]`` -> ``{"lang": "en", "year": 2020}`` (None: no filter)."""
    where: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--filter {item!r}: expected KEY=VALUE, e.g. --filter lang=en")
        if key in where:
            raise UserError(f"--filter {key!r} is given twice; an entry holds one value per key")
        where[key] = A.json_or_text(value)
    return where or None


def search(args: argparse.Namespace) -> dict[str, Any]:
    from ..index import VectorStore
    from ..io import atomic_write

    where = _parse_filters(args.filter)  # refused before any model or index is read
    with VectorStore.open(args.index_dir, write=False) as store:
        model = args.model or (Path(store.meta["model"]) if store.meta.get("model") else None)
        embed = _Embedder(model)
        if args.query:
            queries, labels = embed(args.query, "--query"), list(args.query)
        else:
            parts = list(_read_batches(args.queries, args.batch_size, args.text_field, embed, 0))
            if not parts:
                raise UserError(f"{args.queries}: no queries")
            queries, labels = np.concatenate([p[0] for p in parts]), [i for p in parts for i in p[1]]
        t0 = time.perf_counter()
        hits = store.search(queries, args.k, where=where)
        seconds = time.perf_counter() - t0
    results = [{"query": q, "hits": h} for q, h in zip(labels, hits)]
    out: dict[str, Any] = {"index": str(args.index_dir), "queries": len(results), "k": args.k}
    if where is not None:
        out["filter"] = where
    out["search_seconds"] = round(seconds, 4)
    if args.out is None:
        out["results"] = results
    else:
        with atomic_write(args.out) as f:
            for r in results:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        out["out"] = str(args.out)
    return out


def delete(args: argparse.Namespace) -> dict[str, Any]:
    from ..index import VectorStore

    ids = [A.json_or_text(i) for i in args.ids]
    with VectorStore.open(args.index_dir, lock_timeout=args.lock_timeout) as store:
        missing = store.delete(ids)
        store.save()
        return {
            "index": str(args.index_dir),
            "deleted": len(ids) - len(missing),
            "missing": missing,
            "entries": len(store),
        }


def info(args: argparse.Namespace) -> dict[str, Any]:
    from ..index import VectorStore

    with VectorStore.open(args.index_dir, write=False) as store:
        return store.info()
