"""The vector store: every backend against exact numpy search, persistence of ids/metadata, incremental adds,
deletes, recovery from a killed ``bertkit index add`` and from a half-written snapshot, the CLI and its errors."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main as cli_main
from bertkit.errors import UserError
from bertkit.index import VectorStore, exact_search

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("faiss")


def clustered(n: int, dim: int, rng: np.random.Generator, centers: int = 20) -> np.ndarray:
    """Vectors near a few random centres (structured data, as embeddings are), float32 [n, dim]."""
    c = rng.standard_normal((centers, dim)).astype(np.float32)
    return (c[rng.integers(0, centers, n)] + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def recall(found: list[list[dict]], truth: np.ndarray) -> float:
    return float(
        np.mean([len({h["id"] for h in f} & set(t.tolist())) / len(t) for f, t in zip(found, truth)])
    )


def test_exact_search_matches_brute_force_in_chunks():
    rng = np.random.default_rng(0)
    base, q = (
        rng.standard_normal((1000, 16)).astype(np.float32),
        rng.standard_normal((7, 16)).astype(np.float32),
    )
    scores, ids = exact_search(base, q, 5, chunk=64)
    full = q @ base.T
    want = np.argsort(-full, axis=1)[:, :5]
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_allclose(scores, np.take_along_axis(full, want, axis=1), rtol=1e-5)
    s, i = exact_search(base[:3], q, 5)  # fewer rows than k: padded
    assert (i[:, 3:] == -1).all() and np.isneginf(s[:, 3:]).all()


@pytest.mark.parametrize(
    "backend,params,min_recall,n",
    [
        ("exact", {}, 1.0, 1200),
        ("flat", {}, 1.0, 1200),
        ("hnsw", {"M": 16, "ef_search": 64}, 0.95, 1200),
        ("ivfpq", {"nlist": 16, "pq_m": 8, "nprobe": 8, "refine": 8}, 0.95, 1200),
        # qdrant's local mode writes each point to its own SQLite file (~30 ms a point): keep it small
        ("qdrant", {}, 0.99, 120),
    ],
)
def test_backend_recall_persistence_adds_and_deletes(tmp_path, backend, params, min_recall, n):
    if backend == "qdrant":
        pytest.importorskip("qdrant_client")
    rng = np.random.default_rng(1)
    x = clustered(n, 32, rng)
    q = clustered(20, 32, rng)
    ids = [f"doc{i}" for i in range(len(x))]
    meta = [{"n": i} for i in range(len(x))]
    store = VectorStore.create(tmp_path / "idx", 32, backend, "cosine", **params)
    cut = n * 5 // 6
    store.add(x[:cut], ids[:cut], meta[:cut])
    store.save()
    store.add(x[cut:], ids[cut:], meta[cut:])  # after the snapshot: lives only in the log until reopened
    truth = exact_search(unit(x), unit(q), 10)[1]
    found = store.search(q, 10)
    assert recall([[{"id": int(h["id"][3:])} for h in f] for f in found], truth) >= min_recall
    assert all(h["metadata"] == {"n": int(h["id"][3:])} for h in found[0])
    top = found[0][0]["id"]
    assert store.delete([top, "not-there"]) == ["not-there"]
    assert top not in {h["id"] for h in store.search(q[:1], 10)[0]}
    store.close()

    again = VectorStore.open(tmp_path / "idx")  # snapshot + replayed log (the second add and the delete)
    assert len(again) == n - 1
    after = again.search(q, 10)
    assert top not in {h["id"] for h in after[0]}
    truth_after = exact_search(unit(np.delete(x, int(top[3:]), 0)), unit(q), 10)[1]
    mapped = [[{"id": int(h["id"][3:])} for h in f] for f in after]
    shifted = np.where(truth_after >= int(top[3:]), truth_after + 1, truth_after)
    assert recall(mapped, shifted) >= min_recall
    with pytest.raises(UserError, match="already in the index"):
        again.add(x[:1], ["doc5"])
    again.close()


def test_store_refuses_bad_input(tmp_path):
    store = VectorStore.create(tmp_path / "i", 4, "flat")
    with pytest.raises(UserError, match="dimension 4"):
        store.add(np.zeros((2, 5), np.float32), [1, 2])
    with pytest.raises(UserError, match="NaN"):
        store.add(np.full((1, 4), np.nan, np.float32), [1])
    with pytest.raises(UserError, match="twice"):
        store.add(np.ones((2, 4), np.float32), [1, 1])
    store.close()
    with pytest.raises(UserError, match="already exists"):
        VectorStore.create(tmp_path / "i", 4, "flat")
    with pytest.raises(UserError, match="nlist"):
        VectorStore.create(tmp_path / "p", 4, "ivfpq", nlist=64, pq_m=2).add(
            np.ones((10, 4), np.float32), list(range(10))
        )
    with pytest.raises(UserError, match="no index here"):
        VectorStore.open(tmp_path / "nothing")


def test_hnsw_rebuilds_after_many_deletes_and_ids_are_not_reused(tmp_path):
    rng = np.random.default_rng(2)
    x = clustered(3000, 16, rng)
    store = VectorStore.create(tmp_path / "h", 16, "hnsw", M=8)
    store.add(x, list(range(3000)))
    store.delete(list(range(1500)))  # past a tenth and 1000: the graph is rebuilt without tombstones
    assert len(store.backend.tombstones) == 0 and len(store.backend) == 1500
    store.add(x[:1], [0])  # a re-added id gets a new row: the old row's tombstone cannot hide it
    assert store.search(x[:1], 1)[0][0]["id"] == 0
    store.close()


def test_half_written_snapshot_is_ignored(tmp_path):
    rng = np.random.default_rng(3)
    x = clustered(200, 8, rng)
    store = VectorStore.create(tmp_path / "s", 8, "flat")
    store.add(x[:100], list(range(100)))
    store.save()
    store.add(x[100:], list(range(100, 200)))
    store.close()
    (tmp_path / "s" / ".snapshot-crash.tmp").mkdir()  # what a kill during save leaves
    (tmp_path / "s" / "snapshot-999").mkdir()  # and a newer snapshot that cannot be read
    again = VectorStore.open(tmp_path / "s")
    assert len(again) == 200 and again.search(x[150:151], 1)[0][0]["id"] == 150
    assert not (tmp_path / "s" / ".snapshot-crash.tmp").exists()
    again.close()


def test_a_save_that_fails_while_truncating_the_log_keeps_the_log_and_the_store_writable(
    tmp_path, monkeypatch
):
    rng = np.random.default_rng(4)
    x = clustered(60, 8, rng)
    store = VectorStore.create(tmp_path / "t", 8, "flat")
    store.add(x[:30], list(range(30)))
    rows = store._con.execute("SELECT COUNT(*) FROM log").fetchone()[0]

    def fail(key, value):
        raise OSError("disk full")

    monkeypatch.setattr(store, "_put", fail)
    with pytest.raises(OSError, match="disk full"):
        store.save()
    monkeypatch.undo()
    # rolled back: the log keeps what the failed truncation deleted, and the next write can start its own
    assert store._con.execute("SELECT COUNT(*) FROM log").fetchone()[0] == rows
    store.add(x[30:], list(range(30, 60)))
    store.close()
    again = VectorStore.open(tmp_path / "t")
    assert len(again) == 60 and again.search(x[45:46], 1)[0][0]["id"] == 45
    again.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``bertkit ARGS`` in a subprocess (exit status, stdout, stderr as a user sees them)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True, env=env)


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _main(capsys, *args: str) -> _Result:
    """Run ``bertkit ARGS`` in this process (no interpreter start-up per call)."""
    from bertkit.cli import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return _Result(code, out.out, out.err)


def test_cli_build_add_search_delete_and_errors(tmp_path, capsys):
    rng = np.random.default_rng(4)
    x = clustered(300, 8, rng)
    np.save(tmp_path / "v.npy", x[:200])
    with open(tmp_path / "more.jsonl", "w") as f:
        for i in range(200, 300):
            f.write(json.dumps({"id": f"d{i}", "vector": x[i].tolist(), "metadata": {"i": i}}) + "\n")
    idx = str(tmp_path / "idx")
    r = _main(
        capsys,
        "index",
        "build",
        idx,
        "--input",
        str(tmp_path / "v.npy"),
        "--backend",
        "flat",
        "--batch-size",
        "64",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["entries"] == 200
    r = _main(capsys, "index", "add", idx, "--input", str(tmp_path / "more.jsonl"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["entries"] == 300
    np.save(tmp_path / "q.npy", x[[5, 250]])
    r = _main(capsys, "index", "search", idx, "--queries", str(tmp_path / "q.npy"), "-k", "3")
    res = json.loads(r.stdout)["results"]
    assert res[0]["hits"][0]["id"] == 5 and res[1]["hits"][0] == {
        "id": "d250",
        "score": pytest.approx(1.0, abs=1e-5),
        "metadata": {"i": 250},
    }
    r = _main(capsys, "index", "delete", idx, "--ids", "d250", "5", "nope")
    assert json.loads(r.stdout)["missing"] == ["nope"]
    r = _main(capsys, "index", "search", idx, "--queries", str(tmp_path / "q.npy"), "-k", "1")
    res = json.loads(r.stdout)["results"]
    assert res[0]["hits"][0]["id"] != 5 and res[1]["hits"][0]["id"] != "d250"
    # errors: one line, exit 2
    r = _main(capsys, "index", "build", idx, "--input", str(tmp_path / "v.npy"))
    assert r.returncode == 2 and "--overwrite" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "bad.jsonl").write_text('{"id": 1, "vector": [1, 2]}\n{"id": 2}\n')
    r = _main(capsys, "index", "add", idx, "--input", str(tmp_path / "bad.jsonl"))
    assert r.returncode == 2 and "line 2" in r.stderr
    r = _main(capsys, "index", "add", idx, "--input", str(tmp_path / "more.jsonl"))
    assert r.returncode == 2 and "already in the index" in r.stderr
    r = _main(capsys, "index", "search", str(tmp_path / "none"), "--query", "hello")
    assert r.returncode == 2 and "no index here" in r.stderr


def test_sigkill_during_index_add_loses_no_committed_entry(tmp_path):
    """Kill ``bertkit index add`` in the middle of a large input; every batch committed before the kill
    is in the reopened index and searchable, nothing else is, and the store still accepts adds."""
    rng = np.random.default_rng(5)
    dim, n = 32, 200_000
    np.save(tmp_path / "seed.npy", clustered(10, dim, rng))
    big = clustered(n, dim, rng)
    np.save(tmp_path / "big.npy", big)
    idx = tmp_path / "idx"
    assert (
        _cli(
            "index", "build", str(idx), "--input", str(tmp_path / "seed.npy"), "--backend", "hnsw"
        ).returncode
        == 0
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bertkit",
            "index",
            "add",
            str(idx),
            "--input",
            str(tmp_path / "big.npy"),
            "--batch-size",
            "500",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    committed = 0
    while time.time() < deadline and committed < 3000:
        time.sleep(0.2)
        with sqlite3.connect(idx / "store.db", timeout=30) as con:
            committed = con.execute("SELECT COUNT(*) FROM items").fetchone()[0] - 10
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert committed >= 3000, "the add did not get going in time"
    with sqlite3.connect(idx / "store.db", timeout=30) as con:
        rows = con.execute("SELECT COUNT(*) FROM items").fetchone()[0] - 10
    assert rows >= committed and rows % 500 == 0 and rows < n  # whole batches only, killed midway
    store = VectorStore.open(idx)
    assert len(store) == rows + 10 and len(store.backend) == rows + 10
    probe = [0, rows // 2, rows - 1]
    hits = store.search(big[probe], 1)
    assert [h[0]["id"] for h in hits] == [10 + p for p in probe]
    store.add(big[rows : rows + 5], [10 + rows + i for i in range(5)])
    store.close()


def test_index_benchmark_small_version():
    """The 1M-vector benchmark's code path on 2,000 vectors of dimension 64: every index type reports QPS and recall@10
    against exact search, and the two exact searches (numpy, FAISS flat) agree."""
    import argparse

    from benchmarks.bench_index import run

    rows = run(argparse.Namespace(n=2000, dim=64, threads=1, quick=True, min_seconds=0.02))
    names = [r["name"] for r in rows]
    assert any("exact numpy" in n for n in names) and any("hnsw" in n for n in names)
    assert any("ivfpq+refine" in n for n in names)
    for r in rows:
        assert 0.0 <= r["recall@10"] <= 1.0 and r["ours"] > 0
    hnsw = [r for r in rows if "hnsw" in r["name"]]
    assert max(r["recall@10"] for r in hnsw) >= 0.95


def _jsonl(path: Path, x: np.ndarray, prefix: str) -> None:
    with open(path, "w") as f:
        for i, v in enumerate(x):
            f.write(json.dumps({"id": f"{prefix}{i}", "vector": v.tolist()}) + "\n")


def test_concurrent_index_adds_keep_every_row_of_both(tmp_path, caplog):
    """Two ``bertkit index add`` processes started together: after both exit 0, a reopened index holds
    every row of both in its backend (before writers took turns, each one's snapshot dropped the other's)."""
    rng = np.random.default_rng(6)
    dim, n = 16, 20_000  # 2,000 commits each: seconds of overlap, whatever the start-up times
    x = clustered(2 * n, dim, rng)
    np.save(tmp_path / "seed.npy", clustered(4, dim, rng))
    _jsonl(tmp_path / "a.jsonl", x[:n], "a")
    _jsonl(tmp_path / "b.jsonl", x[n:], "b")
    idx = tmp_path / "idx"
    r = _cli("index", "build", str(idx), "--input", str(tmp_path / "seed.npy"), "--backend", "flat")
    assert r.returncode == 0, r.stderr
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    add = [sys.executable, "-m", "bertkit", "index", "add", str(idx), "--batch-size", "10", "--input"]
    procs = [
        subprocess.Popen([*add, str(tmp_path / f"{w}.jsonl")], env=env, stderr=subprocess.PIPE, text=True)
        for w in "ab"
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    caplog.set_level("WARNING", logger="bertkit")
    store = VectorStore.open(idx)
    assert len(store) == 2 * n + 4 and len(store.backend) == 2 * n + 4
    assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]  # no repair was needed
    probe = [0, n // 2, n - 1, n, n + n // 2, 2 * n - 1]
    assert [h[0]["id"] for h in store.search(x[probe], 1)] == [
        f"a{p}" if p < n else f"b{p - n}" for p in probe
    ]
    store.close()


def test_a_second_writer_waits_then_refuses_in_one_line_and_readers_go_on(tmp_path, capsys):
    from bertkit.index import lock

    rng = np.random.default_rng(7)
    x = clustered(20, 8, rng)
    store = VectorStore.create(tmp_path / "i", 8, "flat")
    store.add(x[:10], list(range(10)))
    store.save()
    with pytest.raises(UserError, match="another process is writing"):
        VectorStore.open(tmp_path / "i", lock_timeout=0)  # this store still holds the lock
    store.close()
    _jsonl(tmp_path / "more.jsonl", x[10:], "m")
    held = lock.acquire(tmp_path / "i", 0)  # a writer in another process, as far as flock is concerned
    try:
        t0 = time.monotonic()
        r = _main(capsys, "index", "add", str(tmp_path / "i"), "--input", str(tmp_path / "more.jsonl"),
                  "--lock-timeout", "0.3")  # fmt: skip
        assert r.returncode == 2 and time.monotonic() - t0 >= 0.3
        (line,) = r.stderr.strip().splitlines()
        assert "another process is writing" in line and "--lock-timeout" in line
        r = _main(capsys, "index", "delete", str(tmp_path / "i"), "--ids", "1", "--lock-timeout", "0")
        assert r.returncode == 2 and "another process is writing" in r.stderr
        r = _main(capsys, "index", "info", str(tmp_path / "i"))  # readers take no lock
        assert r.returncode == 0 and json.loads(r.stdout)["entries"] == 10
        reader = VectorStore.open(tmp_path / "i", write=False)
        with pytest.raises(UserError, match="read-only"):
            reader.add(x[10:11], ["m0"])
        reader.close()
    finally:
        lock.release(held)
    r = _main(capsys, "index", "add", str(tmp_path / "i"), "--input", str(tmp_path / "more.jsonl"))
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == 20


def test_reopen_repairs_a_backend_that_lost_rows(tmp_path, caplog):
    """An index written before writers took turns: rows in ``items`` that neither the snapshot nor the log
    holds. Opening notices the count differs and rebuilds them into the backend."""
    rng = np.random.default_rng(8)
    x = clustered(30, 8, rng)
    store = VectorStore.create(tmp_path / "i", 8, "flat")
    store.add(x[:20], list(range(20)))
    store.save()
    store.close()
    with sqlite3.connect(tmp_path / "i" / "store.db") as con:  # what the lost writer left: rows, no log
        con.executemany(
            "INSERT INTO items (key, vector, metadata) VALUES (?, ?, NULL)",
            [(json.dumps(20 + i), unit(x[20 + i : 21 + i])[0].tobytes()) for i in range(10)],
        )
    caplog.set_level("WARNING", logger="bertkit")
    again = VectorStore.open(tmp_path / "i")
    assert len(again.backend) == 30 and again.search(x[25:26], 1)[0][0]["id"] == 25
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    again.close()


def test_replayed_add_then_delete_counts_no_phantom_entry(tmp_path, caplog):
    """Log after the snapshot: add 5 rows, delete 2 of them. Reopening must not count tombstones for rows
    the backend never held (which would make the entry check rebuild on every open)."""
    rng = np.random.default_rng(9)
    x = clustered(15, 8, rng)
    store = VectorStore.create(tmp_path / "i", 8, "hnsw", M=8)
    store.add(x[:10], list(range(10)))
    store.save()
    store.add(x[10:], list(range(10, 15)))
    store.delete([11, 12])
    store.close()
    caplog.set_level("WARNING", logger="bertkit")
    again = VectorStore.open(tmp_path / "i", write=False)
    assert len(again.backend) == 13 and not caplog.records
    again.close()


def _die(store: VectorStore) -> None:
    """What SIGKILL does to a writer: nothing saved, its connection and its flock gone."""
    from bertkit.index import lock

    store.backend.close()
    store._con.close()
    lock.release(store._lock_fd)


def _check_store(path: Path, committed: dict, exact: bool) -> None:
    """A reader sees every committed entry and nothing else, in the rows and in the backend."""
    reader = VectorStore.open(path, write=False)
    try:
        keys = {json.loads(k) for (k,) in reader._con.execute("SELECT key FROM items")}
        assert keys == set(committed) and len(reader.backend) == len(committed)
        if committed:
            ids = list(committed)
            hits = reader.search(np.stack([committed[i] for i in ids]), k=len(ids))
            assert all({h["id"] for h in row} <= keys for row in hits)
            if exact:
                assert [row[0]["id"] for row in hits] == ids
    finally:
        reader.close()


def test_fuzz_interleaved_writers_kills_and_reopens(tmp_path):
    """Hypothesis: two writer slots open, add, delete, save, close or die (as SIGKILL leaves them) in any
    order, with readers in between. A second writer is refused exactly while the first holds the index;
    every reader, and the store after the last death, holds every committed entry and nothing else."""
    pytest.importorskip("hypothesis")
    import itertools

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    op = st.tuples(
        st.sampled_from(["open", "add", "delete", "save", "close", "die", "read"]),
        st.integers(0, 1),
        st.integers(1, 5),
    )
    counter = itertools.count()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(backend=st.sampled_from(["exact", "flat", "hnsw"]), ops=st.lists(op, max_size=30))
    def run(backend, ops):
        path = tmp_path / f"fuzz{next(counter)}"
        VectorStore.create(path, 4, backend, **({"M": 8} if backend == "hnsw" else {})).close()
        rng = np.random.default_rng(len(ops))
        committed: dict[int, np.ndarray] = {}
        writers: list[VectorStore | None] = [None, None]
        fresh = itertools.count()
        try:
            for name, w, n in ops:
                store = writers[w]
                if name == "open" and store is None:
                    other_holds = writers[1 - w] is not None
                    try:
                        writers[w] = VectorStore.open(path, lock_timeout=0)
                        assert not other_holds, "two writers at once"
                    except UserError as e:
                        assert other_holds and "another process is writing" in str(e)
                elif name == "add" and store is not None:
                    x = rng.standard_normal((n, 4)).astype(np.float32)
                    keys = [next(fresh) for _ in range(n)]
                    store.add(x, keys)
                    committed.update(zip(keys, x))
                elif name == "delete" and store is not None and committed:
                    gone = list(committed)[::2][:n]
                    assert store.delete([*gone, -1]) == [-1]
                    for k in gone:
                        del committed[k]
                elif name == "save" and store is not None:
                    store.save()
                elif name in ("close", "die") and store is not None:
                    store.close() if name == "close" else _die(store)
                    writers[w] = None
                elif name == "read":
                    _check_store(path, committed, exact=backend != "hnsw")
        finally:
            for store in writers:
                if store is not None:
                    _die(store)
        _check_store(path, committed, exact=backend != "hnsw")

    run()


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_snapshot_folders_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = VectorStore.create(tmp_path / "i", 4, "flat")
        store.add(np.eye(4, dtype=np.float32), [0, 1, 2, 3])
        snap = store.save()
        store.close()
    finally:
        os.umask(old)
    assert snap.stat().st_mode & 0o777 == 0o777 & ~umask


def test_running_ids_are_not_reused_after_a_delete(tmp_path, capsys):
    """``index add`` of a ``.npy`` (no ids: running numbers) after a delete once started at the entry count,
    handing out the deleted ids again (or refusing ids still present)."""
    x = np.random.default_rng(10).standard_normal((13, 4)).astype(np.float32)
    np.save(tmp_path / "a.npy", x[:10])
    np.save(tmp_path / "b.npy", x[10:])
    idx = str(tmp_path / "i")
    assert (
        _main(
            capsys, "index", "build", idx, "--input", str(tmp_path / "a.npy"), "--backend", "flat"
        ).returncode
        == 0
    )
    assert _main(capsys, "index", "delete", idx, "--ids", "8", "9", "2").returncode == 0
    r = _main(capsys, "index", "add", idx, "--input", str(tmp_path / "b.npy"))
    assert r.returncode == 0, r.stderr
    with VectorStore.open(idx, write=False) as store:
        keys = {json.loads(k) for (k,) in store._con.execute("SELECT key FROM items")}
        assert keys == {0, 1, 3, 4, 5, 6, 7, 10, 11, 12}
        assert [h[0]["id"] for h in store.search(x[10:], 1)] == [10, 11, 12]


def test_a_failed_build_leaves_no_folder_and_a_failed_overwrite_the_old_index(tmp_path, capsys):
    x = np.random.default_rng(11).standard_normal((20, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", x)
    idx = tmp_path / "i"
    ivfpq = ["--input", str(tmp_path / "v.npy"), "--backend", "ivfpq", "--nlist", "4", "--pq-m", "2"]
    r = _main(capsys, "index", "build", str(idx), *ivfpq)  # 20 vectors cannot train 4 cells
    assert r.returncode == 2 and "nlist" in r.stderr and not idx.exists()
    assert (
        _main(
            capsys, "index", "build", str(idx), "--input", str(tmp_path / "v.npy"), "--backend", "flat"
        ).returncode
        == 0
    )
    r = _main(capsys, "index", "build", str(idx), *ivfpq, "--overwrite")
    assert r.returncode == 2 and "nlist" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i", "v.npy"]  # no backup or temp left
    with VectorStore.open(idx, write=False) as store:
        assert len(store) == 20 and store.kind == "flat"


def test_many_queries_are_searched_in_blocks(tmp_path, monkeypatch):
    """``index search --queries`` of 20,000 queries once held a [queries x chunk] matrix (over 3 GB): the
    store hands the backend at most QUERY_BLOCK queries at a time, with the same hits."""
    from bertkit.index import store as store_module

    monkeypatch.setattr(store_module, "QUERY_BLOCK", 64)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    q = rng.standard_normal((150, 8)).astype(np.float32)
    store = VectorStore.create(tmp_path / "i", 8, "exact")
    store.add(x, list(range(300)))
    sizes = []
    search = store.backend.search
    monkeypatch.setattr(store.backend, "search", lambda qs, k: sizes.append(len(qs)) or search(qs, k))
    hits = store.search(q, 3)
    assert sizes == [64, 64, 22]
    want = exact_search(unit(x), unit(q), 3)[1]
    assert [[h["id"] for h in row] for row in hits] == want.tolist()
    store.close()


@pytest.mark.parametrize("backend", ["exact", "hnsw", "qdrant"])
def test_metadata_filter_is_exact_among_the_matching_entries(tmp_path, monkeypatch, backend):
    """``search(where=...)`` returns the exact top-k among entries whose metadata matches every key (JSON
    equality: 1, 1.0 and true differ), read in chunks, on any backend, deletes included."""
    from bertkit.index import store as store_module

    if backend == "qdrant":
        pytest.importorskip("qdrant_client")
    monkeypatch.setattr(store_module, "FILTER_CHUNK", 7)  # several chunks to merge
    rng = np.random.default_rng(21)
    n = 60
    x = clustered(n, 8, rng)
    q = clustered(5, 8, rng)
    langs = ["en", "de", "fr"]
    meta: list = [{"lang": langs[i % 3], "year": 2000 + i % 4} for i in range(n)]
    meta[0], meta[1], meta[2] = None, "en", {"lang": "en", "year": 2000.0}  # not objects / a float year
    store = VectorStore.create(tmp_path / "i", 8, backend, "cosine")
    store.add(x, [f"d{i}" for i in range(n)], meta)
    store.delete(["d3"])  # an "en", 2003 entry

    def truth(keep: list[int], k: int) -> list[list[str]]:
        best = exact_search(unit(x[keep]), unit(q), k)[1]
        return [[f"d{keep[j]}" for j in row if j >= 0] for row in best]

    def match(m, where) -> bool:
        return isinstance(m, dict) and all(
            key in m and json.dumps(m[key]) == json.dumps(v) for key, v in where.items()
        )

    for where, k in (
        ({"lang": "en"}, 4),
        ({"lang": "en", "year": 2000}, 10),
        ({"year": 2003}, 3),
        ({"lang": "xx"}, 2),
    ):
        keep = [i for i in range(n) if i != 3 and match(meta[i], where)]
        got = store.search(q, k, where=where)
        assert [[h["id"] for h in row] for row in got] == truth(keep, k), where
        assert all(match(h["metadata"], where) for row in got for h in row)
    # d12, d24, d36, d48: not d0 (no object) nor d2 (its year is 2000.0)
    hits = store.search(q[:1], 100, where={"lang": "en", "year": 2000})[0]
    assert sorted(h["id"] for h in hits) == ["d12", "d24", "d36", "d48"]
    assert store.search(q[:1], 5, where={"year": 2000.0})[0][0]["id"] == "d2"
    with pytest.raises(UserError, match="field names"):
        store.search(q, 3, where=["lang", "en"])
    store.close()


def test_cli_search_filter(tmp_path, capsys):
    rng = np.random.default_rng(22)
    x = clustered(40, 8, rng)
    with open(tmp_path / "e.jsonl", "w") as f:
        for i in range(40):
            meta = {"lang": "en" if i % 2 else "de", "year": 2020 + i % 3, "draft": i % 5 == 0}
            f.write(json.dumps({"id": i, "vector": x[i].tolist(), "metadata": meta}) + "\n")
    idx = str(tmp_path / "idx")
    assert _main(capsys, "index", "build", idx, "--input", str(tmp_path / "e.jsonl")).returncode == 0
    np.save(tmp_path / "q.npy", x[[0, 1]])
    base = ("index", "search", idx, "--queries", str(tmp_path / "q.npy"), "-k", "40")
    r = _main(capsys, *base, "--filter", "lang=en", "--filter", "year=2021", "--filter", "draft=false")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["filter"] == {"lang": "en", "year": 2021, "draft": False}
    want = {i for i in range(40) if i % 2 and 2020 + i % 3 == 2021 and i % 5}
    for res in out["results"]:
        assert {h["id"] for h in res["hits"]} == want
    for bad, words in (("lang", ["'lang'", "KEY=VALUE"]), ("=en", ["'=en'"])):
        r = _main(capsys, *base, "--filter", bad)
        assert r.returncode == 2 and all(w in r.stderr for w in words) and r.stderr.count("\n") == 1, r.stderr
    r = _main(capsys, *base, "--filter", "lang=en", "--filter", "lang=de")
    assert r.returncode == 2 and "twice" in r.stderr


def test_qdrant_points_carry_the_id_and_metadata_as_payload(tmp_path):
    """A Qdrant user sees each entry's own id and metadata on its point (added, replayed, rebuilt)."""
    pytest.importorskip("qdrant_client")
    rng = np.random.default_rng(23)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    ids: list = ["a", 7, ["x", 1], "b", "c", "d"]
    meta: list = [{"text": "first", "lang": "en"}, None, 3, {"k": [1, 2]}, {"text": "fifth"}, "six"]

    def payloads(store: VectorStore) -> dict:
        rows = dict(store._con.execute("SELECT key, id FROM items"))
        points = store.backend.client.retrieve(
            store.backend.collection, ids=list(rows.values()), with_payload=True
        )
        by_row = {p.id: p.payload for p in points}
        return {key: by_row[row] for key, row in rows.items()}

    def want(keep: range) -> dict:
        return {json.dumps(ids[i], sort_keys=True): {"id": ids[i], "metadata": meta[i]} for i in keep}

    store = VectorStore.create(tmp_path / "q", 4, "qdrant")
    store.add(x[:4], ids[:4], meta[:4])
    store.save()
    store.add(x[4:], ids[4:], meta[4:])  # in the log only: replayed on the next open
    assert payloads(store) == want(range(6))
    store.close()
    again = VectorStore.open(tmp_path / "q")
    assert payloads(again) == want(range(6))
    again.delete(["b"])
    again.rebuild()
    assert payloads(again) == want([0, 1, 2, 4, 5])
    again.close()


def test_indexes_on_a_qdrant_server_each_keep_their_own_collection(tmp_path, monkeypatch):
    """`--qdrant-url`: the vectors go to the server named at build time, in a collection of the index's own
    (kept in its metadata, so a reopened index reaches the same one), and two indexes on one server never
    see each other's points. The server is stood in for by one in-memory Qdrant per URL."""
    qdrant_client = pytest.importorskip("qdrant_client")
    servers: dict[str, object] = {}
    real = qdrant_client.QdrantClient

    class Server(real):  # one shared in-memory Qdrant per URL; closing a connection keeps the server
        def __new__(cls, url=None, path=None, **kw):
            if url is None:
                return real(path=path, **kw)
            if url not in servers:
                servers[url] = real(location=":memory:")
                servers[url].close = lambda: None
            return servers[url]

    monkeypatch.setattr(qdrant_client, "QdrantClient", Server)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    url = "http://qdrant.example:6333"
    for name in ("a", "b"):
        assert cli_main(["index", "build", str(tmp_path / name), "--input", str(tmp_path / f"{name}.npy"),
                         "--backend", "qdrant", "--qdrant-url", url]) == 0  # fmt: skip
    stores = {n: VectorStore.open(tmp_path / n, write=False) for n in ("a", "b")}
    collections = {n: s.backend.collection for n, s in stores.items()}
    assert collections["a"] != collections["b"] and all(
        c.startswith("bertkit-") for c in collections.values()
    )
    assert list(servers) == [url] and {c.name for c in servers[url].get_collections().collections} == set(
        collections.values()
    )
    assert len(stores["a"]) == 3 and len(stores["b"]) == 2
    hits = stores["b"].search(b[:1], k=5)[0]  # b's own points only: two, itself first
    assert len(hits) == 2 and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    for s in stores.values():
        s.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "qdrant", "--qdrant-url", "qdrant.example:6333"], "expected http://host:port"),
        (
            ["--backend", "hnsw", "--qdrant-url", "http://qdrant.example:6333"],
            "--qdrant-url needs --backend qdrant",
        ),
    ],
)
def test_a_bad_qdrant_url_is_refused_in_one_line(tmp_path, capsys, argv, message):
    np.save(tmp_path / "v.npy", np.ones((2, 4), np.float32))
    try:  # argparse's own refusals exit; bertkit's return 2
        code = cli_main(["index", "build", str(tmp_path / "i"), "--input", str(tmp_path / "v.npy"), *argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "i").exists()
