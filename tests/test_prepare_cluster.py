"""``bertkit prepare --cluster``: shards built on a Dask cluster (a LocalCluster of two worker processes started
by the test) equal the single-process ones byte for byte, resume like them, and bad setups are one line."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from bertkit.cli import main
from bertkit.data import prepare, train_vocab
from bertkit.errors import UserError
from tests.test_data_shards import write_corpus


@pytest.fixture(scope="module")
def corpus_and_vocab(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    corpus = write_corpus(d / "corpus.txt", n_docs=240, seed=3)  # ~10 shards of 4 KB
    train_vocab([corpus], 60, d / "vocab.txt", progress=False, min_frequency=1)
    return corpus, d / "vocab.txt"


def _args(corpus, vocab, out, *extra):
    return ["prepare", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(out), "--quiet", *extra]


def _files(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_local_cluster_equals_one_process_and_resumes(corpus_and_vocab, tmp_path, capsys):
    pytest.importorskip("distributed")
    corpus, vocab = corpus_and_vocab
    size = ["--shard-size-mb", "0.004"]  # ~10 shards: both workers get several
    assert main(_args(corpus, vocab, tmp_path / "one", "--workers", "1", *size)) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["num_shards"] >= 6

    assert main(_args(corpus, vocab, tmp_path / "dask", "--cluster", "local:2", *size)) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["cluster"] == "local:2" and res["shards_written"] == one["num_shards"]
    # every file, the manifest and each shard's record included, is byte-identical
    assert _files(tmp_path / "dask") == _files(tmp_path / "one")

    # a second run skips every shard and leaves the files as they were
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "dask").glob("shard_*")}
    assert main(_args(corpus, vocab, tmp_path / "dask", "--cluster", "local:2", "--resume", *size)) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["shards_skipped"] == one["num_shards"] and again["shards_written"] == 0
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "dask").glob("shard_*")} == mtimes
    assert _files(tmp_path / "dask") == _files(tmp_path / "one")


def test_a_worker_that_does_not_see_out_fails_in_one_line(corpus_and_vocab, tmp_path):
    """The worker-side builder refuses an output folder whose vocab.txt it cannot see (not shared storage)."""
    pytest.importorskip("distributed")
    from bertkit.data.cluster import _build_on_worker

    task = (0, [["alpha beta ."]], "0" * 64, str(tmp_path), "uint16", {"vocab_sha256": "f" * 64})
    with pytest.raises(UserError, match="storage every worker sees"):
        _build_on_worker(task, True)
    assert not any(tmp_path.iterdir())


def test_a_shard_failing_on_a_worker_stops_the_run_in_one_line(
    corpus_and_vocab, tmp_path, monkeypatch, capfd
):
    """An error raised on a worker reaches the coordinator as itself: here the workers find a vocab.txt in --out
    that is not the coordinator's, as on a folder that is not shared."""
    pytest.importorskip("distributed")
    from bertkit.data import shards

    corpus, vocab = corpus_and_vocab
    monkeypatch.setattr(shards, "_copy_vocab", lambda v, out: (out / "vocab.txt").write_text("[PAD]\n"))
    out = tmp_path / "d"
    assert main(_args(corpus, vocab, out, "--cluster", "local:2", "--shard-size-mb", "0.004")) == 2
    err = capfd.readouterr().err.strip()  # at the descriptor: the worker processes' stderr included
    assert len(err.splitlines()) == 1 and "storage every worker sees" in err
    assert not list(out.glob("shard_*")) and not (out / "manifest.json").exists()


def test_tasks_name_the_output_folder_absolutely_and_a_missing_module_is_one_line(tmp_path, monkeypatch):
    """A relative --out is sent as an absolute path: remote workers run in another directory."""
    pytest.importorskip("distributed")
    from concurrent.futures import Future

    from bertkit.data.cluster import build_on_cluster

    class Client:  # the two calls build_on_cluster makes, answered at once
        def __init__(self):
            self.submitted: list = []

        def nthreads(self):
            return {"w1": 1}

        def cancel(self, futures):
            self.cancelled = len(futures)

        def submit(self, fn, task, lowercase, key):
            self.submitted.append(task)
            f = Future()
            f.set_result({"index": task[0]})
            return f

    class Bar:
        def update(self, n):
            pass

    monkeypatch.chdir(tmp_path)
    client, records = Client(), []
    tasks = [((k, [["a ."]], "0" * 64, "out", "uint16", {}), 1) for k in range(3)]
    build_on_cluster(client, iter(tasks), True, records, Bar())
    assert records == [{"index": 0}, {"index": 1}, {"index": 2}]
    assert [t[3] for t in client.submitted] == [str(tmp_path / "out")] * 3

    # a worker host without bertkit: the task fails there with ModuleNotFoundError, reported in one line
    def fail(*args, **kwargs):
        f = Future()
        f.set_exception(ModuleNotFoundError("No module named 'bertkit'", name="bertkit"))
        f.key = "bertkit-prepare-shard_00000-x"
        return f

    client.submit = fail
    with pytest.raises(UserError, match="install bertkit on every worker host"):
        build_on_cluster(client, iter(tasks), True, [], Bar())
    assert client.cancelled == 1  # the other shard in flight is cancelled, not left running


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_one_line(corpus_and_vocab, tmp_path, capsys):
    pytest.importorskip("distributed")
    corpus, vocab = corpus_and_vocab
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    out = tmp_path / "d"
    assert main(_args(corpus, vocab, out, "--cluster", address, "--cluster-timeout", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and address in err and "dask scheduler" in err
    assert not out.exists() or not any(out.iterdir())  # nothing left that would need --resume or --overwrite


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("local:0", "positive number of workers"),
        ("local:two", "positive number of workers"),
        ("tcp://a b:1", "not a scheduler address"),
        ("nosuch://host:1", "not a Dask scheduler address"),
    ],
)
def test_malformed_address_is_one_line(corpus_and_vocab, tmp_path, capsys, address, message):
    pytest.importorskip("distributed")
    corpus, vocab = corpus_and_vocab
    assert main(_args(corpus, vocab, tmp_path / "d", "--cluster", address, "--cluster-timeout", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_workers_and_cluster_together_are_refused(corpus_and_vocab, tmp_path, capsys):
    corpus, vocab = corpus_and_vocab
    assert main(_args(corpus, vocab, tmp_path / "d", "--cluster", "local:2", "--workers", "2")) == 2
    assert "--workers and --cluster" in capsys.readouterr().err


def test_without_dask_cluster_is_refused_naming_the_extra(corpus_and_vocab, tmp_path, monkeypatch, capsys):
    corpus, vocab = corpus_and_vocab
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` now raises ImportError
    with pytest.raises(UserError, match=r"bertkit\[cluster\]"):
        prepare([corpus], vocab, tmp_path / "p", cluster="local:2", progress=False)
    assert main(_args(corpus, vocab, tmp_path / "d", "--cluster", "local:2")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bertkit[cluster]" in err
    # the single-host path does not need it
    assert main(_args(corpus, vocab, tmp_path / "d1")) == 0
