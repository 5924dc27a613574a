"""``bertkit prepare --cluster``: build the shards on a Dask distributed cluster.

The coordinator (this process) streams the corpus, groups documents into shards and skips finished ones exactly
as the single-host path does; each remaining shard's documents travel with its task to a worker, which builds
it with the same builder and writes its files atomically into the output folder. That folder must be on
storage every worker sees. The workers load the vocabulary from it (the coordinator copies it there first and
each worker checks its sha256), so a worker that does not see the folder fails with one line at its first
shard instead of writing shards where nobody reads them. The coordinator writes the manifest.

``local:N`` starts a LocalCluster of N worker processes on this host (one thread each, no dashboard), for
tests and one big host; any other address is a running scheduler's, e.g. ``tcp://host:8786``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bertkit.errors import UserError

__all__ = ["require_distributed", "parse_address", "connect", "build_on_cluster"]

EXTRA = "pip install 'bertkit[cluster]'"


def require_distributed():
    """The ``distributed`` module, or a one-line UserError naming the extra that installs it."""
    try:
        import distributed
    except ImportError:
        raise UserError(f"--cluster needs Dask distributed, which is not installed: {EXTRA}") from None
    return distributed


def parse_address(address: str) -> tuple[str | None, int]:
    """``(scheduler_address, 0)``, or ``(None, n)`` for ``local:n``."""
    if address.startswith("local:"):
        n = address[len("local:") :]
        if not n.isdigit() or int(n) < 1:
            raise UserError(f"--cluster {address}: local:N needs a positive number of workers, e.g. local:4")
        return None, int(n)
    if not address.strip() or any(c.isspace() for c in address):
        raise UserError(f"--cluster {address!r}: not a scheduler address (e.g. tcp://host:8786 or local:4)")
    return address, 0


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@contextmanager
def connect(address: str, timeout: float = 30.0, max_workers: int | None = None) -> Iterator:
    """A ``distributed.Client`` for ``address`` (see the module docstring), closed (and a local cluster shut
    down) on exit. A scheduler that cannot be reached in ``timeout`` seconds, or has no worker by then, is a
    UserError."""
    from bertkit.workers import clamp_workers

    distributed = require_distributed()
    scheduler, n_local = parse_address(address)
    cluster = client = None
    # Dask logs every connection at INFO: shown with --verbose only, like bertkit's own INFO lines.
    # Local workers' own logs (a failed shard's error, which this process reports in one line) likewise.
    verbose = logging.getLogger("bertkit").isEnabledFor(logging.INFO)
    dask_log = logging.getLogger("distributed")
    dask_level = dask_log.level
    if not verbose:
        dask_log.setLevel(logging.WARNING)
    try:
        if scheduler is None:
            # every worker starts at once: no more than the CPUs (and the shards) can use, as for --workers
            n = clamp_workers(n_local, max_workers or n_local, flag=f"--cluster {address}")
            cluster = distributed.LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.INFO if verbose else logging.CRITICAL,
            )
            client = distributed.Client(cluster)
        else:
            try:
                client = distributed.Client(scheduler, timeout=timeout)
            except (ValueError, TypeError) as e:
                raise UserError(
                    f"--cluster {address}: not a Dask scheduler address ({_first_line(e)})"
                ) from None
            except (OSError, TimeoutError) as e:
                raise UserError(
                    f"--cluster {address}: cannot reach a Dask scheduler within {timeout:g} s "
                    f"({_first_line(e)}); start one with `dask scheduler`"
                ) from None
            try:
                client.wait_for_workers(1, timeout=timeout)
            except (OSError, TimeoutError):
                raise UserError(
                    f"--cluster {address}: the scheduler has no worker after {timeout:g} s; "
                    f"start some with `dask worker {address}`"
                ) from None
        yield client
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        dask_log.setLevel(dask_level)


# --- on a worker -------------------------------------------------------------------------------------

# One tokenizer and chunk cache per worker thread: a worker may run several tasks at once, and the cache is
# not safe to share between threads.
_LOCAL = threading.local()


def _build_on_worker(task: tuple, lowercase: bool) -> dict:
    """Build one shard (``task`` as :func:`bertkit.data.shard_build._build_shard` takes it) on a worker."""
    from bertkit.data.shard_build import ChunkCache, _build_shard, load_tokenizer, sha256_file, vocab_name

    out_dir, options = Path(task[3]), task[5]
    vocab = out_dir / vocab_name(options.get("tokenizer", "wordpiece"))
    key = (str(vocab), options["vocab_sha256"], lowercase)
    if getattr(_LOCAL, "key", None) != key:
        if not vocab.is_file() or sha256_file(vocab) != options["vocab_sha256"]:
            raise UserError(
                f"{vocab}: missing or not the coordinator's vocabulary on worker host {socket.gethostname()}; "
                "--out must be on storage every worker sees"
            )
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the workers are the parallelism
        _LOCAL.tok, _LOCAL.cache, _LOCAL.key = load_tokenizer(vocab, lowercase), ChunkCache(), key
    return _build_shard(task, _LOCAL.tok, _LOCAL.cache)


# --- on the coordinator ------------------------------------------------------------------------------


def build_on_cluster(client, tasks: Iterator[tuple[tuple, int]], lowercase: bool, records: list, bar) -> None:
    """Submit each ``(task, size)`` of ``tasks`` to ``client``'s cluster, at most twice its worker threads in
    flight (memory on the coordinator ~ shard size x that), appending the shards' records to ``records`` in
    submission order and advancing ``bar`` by each shard's ``size``."""
    import dask
    from distributed import KilledWorker

    from bertkit.data.shard_build import _shard_name

    in_flight = max(1, 2 * sum(client.nthreads().values()))
    run = uuid.uuid4().hex[:12]  # keys unique on a scheduler that other runs share
    pending: deque = deque()

    def collect() -> None:
        future, size = pending.popleft()
        try:
            records.append(future.result())
        except KilledWorker as e:
            raise UserError(
                f"{future.key}: the workers building this shard died ({_first_line(e)})"
            ) from None
        except ModuleNotFoundError as e:  # raised where the task ran: a worker without bertkit (or numpy...)
            raise UserError(
                f"{future.key}: a worker cannot import {e.name!r}; install bertkit on every worker host"
            ) from None
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            raise UserError(f"{future.key}: cancelled (lost the connection to the scheduler?)") from None
        bar.update(size)

    # A shard's documents are its task's input by design (they pass through the scheduler once), so Dask's
    # warning about graphs over 10 MB (--shard-size-mb over ~8) says nothing useful here.
    quiet = {"distributed.admin.large-graph-warning-threshold": "4GiB"}
    try:
        for task, size in tasks:
            # the output folder as an absolute path: a worker elsewhere runs in another directory
            task = (*task[:3], os.path.abspath(task[3]), *task[4:])
            key = f"bertkit-prepare-{_shard_name(task[0])}-{run}"
            with dask.config.set(quiet):
                future = client.submit(_build_on_worker, task, lowercase, key=key)
            pending.append((future, size))
            while len(pending) >= in_flight:
                collect()
        while pending:
            collect()
    finally:  # also when a shard failed: what is still queued must not run on after us
        if pending:
            client.cancel([f for f, _ in pending])
