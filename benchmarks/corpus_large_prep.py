"""Measure ``bertkit vocab`` and ``bertkit prepare`` on the large compressed corpus (../shared/data/corpus-large).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m benchmarks.corpus_large_prep [--out-dir /work/runs/corpus-large]``

Each command runs as ``nice -n 10 /usr/bin/time -v python -m bertkit ...`` (this checkout's code). Recorded per
command: wall seconds, user+sys CPU seconds (``time -v``: the process and the workers it waited for), its
"Maximum resident set size" (the largest single process), and the peak over the run of the summed resident sets
of the whole process tree (parent and workers, sampled every half second with psutil; shared pages count once per
process, so the sum is an upper bound). The JSON goes to ``docs/perf/corpus-large-prepare.json``; the outputs
(vocab.txt, the data folder) stay in ``--out-dir``, outside the repository. ``--subset-files N`` measures on the
first N files only (say so when reporting).

``--runs w1,w2,cluster=local:2`` times one ``prepare`` per entry (``wN``: ``--workers N``; ``cluster=ADDR``:
``--cluster ADDR``), each into its own folder ``DATA_NAME-ENTRY``, records the load average before and after
each, and checks that every run's shard files (``shard_*``) have the same sha256 as the first run's.
``--nice N`` sets the priority the commands run at (10 by default).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "corpus-large"
JSON_OUT = ROOT / "docs" / "perf" / "corpus-large-prepare.json"


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    m = re.search(r"^Model name:\s*(.+)$", out, re.M)
    return m.group(1).strip() if m else "unknown"


class TreeSampler(threading.Thread):
    """Every ``interval`` seconds: the summed RSS and PSS (bytes) of a process and all its descendants."""

    def __init__(self, pid: int, interval: float = 1.0):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = self.peak_procs = 0
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self.stop.is_set():
            rss = pss = n = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    pss += p.memory_full_info().pss
                    n += 1
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, n)
            self.stop.wait(self.interval)


def _time_v(text: str) -> dict[str, float]:
    """The numbers of ``/usr/bin/time -v``'s report that we keep."""

    def field(name: str) -> str:
        m = re.search(rf"^\s*{re.escape(name)}: (.+)$", text, re.M)
        if not m:
            raise RuntimeError(f"/usr/bin/time -v printed no {name!r}")
        return m.group(1).strip()

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {
        "wall_s": round(wall, 2),
        "user_s": float(field("User time (seconds)")),
        "sys_s": float(field("System time (seconds)")),
        "max_single_rss_mb": round(int(field("Maximum resident set size (kbytes)")) / 1024, 1),
    }


def measure(bertkit_args: list[str], log: Path, nice: int = 10) -> dict[str, Any]:
    """Run ``bertkit ARGS`` under nice and ``/usr/bin/time -v``; its numbers and its JSON result."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    cmd = ["nice", "-n", str(nice), "/usr/bin/time", "-v", sys.executable, "-m", "bertkit", *bertkit_args]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    with open(log, "w", encoding="utf-8") as err, tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err)
        sampler = TreeSampler(proc.pid, interval=0.5)
        sampler.start()
        rc = proc.wait()
        sampler.stop.set()
        sampler.join()
        out.seek(0)
        result = out.read()
    report = log.read_text(encoding="utf-8", errors="replace")
    if rc != 0:
        raise RuntimeError(f"bertkit {' '.join(bertkit_args)} exited {rc}; see {log}:\n{report[-2000:]}")
    t = _time_v(report)
    return {
        "command": "bertkit " + " ".join(bertkit_args),
        "nice": nice,
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": t["wall_s"],
        "cpu_s": round(t["user_s"] + t["sys_s"], 2),
        "user_s": t["user_s"],
        "sys_s": t["sys_s"],
        # the sampled sum can miss a peak shorter than the interval that time -v saw in one process
        "peak_rss_mb": max(round(sampler.peak_rss / 2**20, 1), t["max_single_rss_mb"]),
        "sampled_tree_rss_mb": round(sampler.peak_rss / 2**20, 1),
        "peak_pss_mb": round(sampler.peak_pss / 2**20, 1),
        "max_single_rss_mb": t["max_single_rss_mb"],
        "processes_sampled": sampler.peak_procs,
        "result": json.loads(result),
    }


def shard_hashes(data: Path) -> dict[str, str]:
    """sha256 of each ``shard_*`` file (arrays and records) of a prepared folder, read from disk."""
    from bertkit.data.shard_build import sha256_file

    return {p.name: sha256_file(p) for p in sorted(data.glob("shard_*"))}


def _run_args(entry: str) -> list[str]:
    """``prepare`` arguments for one ``--runs`` entry: ``wN`` or ``cluster=ADDRESS``."""
    if entry.startswith("cluster="):
        return ["--cluster", entry[len("cluster=") :]]
    if entry[:1] == "w" and entry[1:].isdigit():
        return ["--workers", entry[1:]]
    raise SystemExit(f"--runs {entry!r}: each entry is wN or cluster=ADDRESS")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--out-dir", type=Path, default=Path("/work/runs/corpus-large"))
    ap.add_argument("--json", type=Path, default=JSON_OUT)
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--subset-files", type=int, default=0, help="only the first N corpus files (0: all)")
    ap.add_argument("--format", default="auto", help="prepare's --format (paragraphs: split into sentences)")
    ap.add_argument("--data-name", default="data", help="prepare's output folder under --out-dir")
    ap.add_argument("--skip-vocab", action="store_true", help="reuse --out-dir/vocab.txt; time prepare only")
    ap.add_argument("--vocab", type=Path, help="with --skip-vocab: this vocab.txt instead of --out-dir's")
    ap.add_argument(
        "--runs", default="", help="prepare runs, e.g. w1,w2,cluster=local:2 (default: w{workers})"
    )
    ap.add_argument("--nice", type=int, default=10, help="priority of the measured commands")
    ap.add_argument("--notes", default="", help="appended to the JSON's notes (the machine's state)")
    a = ap.parse_args(argv)
    if not a.corpus.is_dir():
        print(f"{a.corpus}: corpus folder not found", file=sys.stderr)
        return 2
    corpus = [str(a.corpus)]
    if a.subset_files:
        corpus = [str(p) for p in sorted(a.corpus.iterdir())[: a.subset_files]]
    a.out_dir.mkdir(parents=True, exist_ok=True)
    vocab, data = a.vocab or a.out_dir / "vocab.txt", a.out_dir / a.data_name
    load_before = os.getloadavg()
    commit = _commit()  # now: the checkout may move on while the commands run
    runs = []
    if not a.skip_vocab:
        runs.append(
            measure(
                [
                    "vocab",
                    "--corpus",
                    *corpus,
                    "--vocab-size",
                    str(a.vocab_size),
                    "--out",
                    str(vocab),
                    "--overwrite",
                ],
                a.out_dir / "vocab.log",
            )
        )
    fmt = [] if a.format == "auto" else ["--format", a.format]
    entries = [e for e in a.runs.split(",") if e] or [f"w{a.workers}"]
    hashes: dict[str, dict[str, str]] = {}
    for entry in entries:
        out = data if not a.runs else a.out_dir / f"{a.data_name}-{entry.replace('=', '-').replace(':', '')}"
        runs.append(
            measure(
                [
                    "prepare", "--corpus", *corpus, "--vocab", str(vocab), "--out", str(out), *fmt,
                    "--max-seq-length", str(a.max_seq_length), *_run_args(entry), "--overwrite",
                ],
                a.out_dir / f"prepare-{out.name}.log",
                a.nice,
            )
        )  # fmt: skip
        if a.runs:
            hashes[entry] = shard_hashes(out)
            data = out
    shards_equal = None
    if len(hashes) > 1:
        first = next(iter(hashes.values()))
        shards_equal = {e: h == first for e, h in hashes.items()}
        shards_equal["files_compared"] = len(first)
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    doc = {
        "what": "bertkit vocab + prepare on the compressed large corpus (xz files read as streams)",
        "corpus": corpus,
        "subset": bool(a.subset_files),
        "prepare_format": a.format,
        "commit": commit,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "notes": (
            "contended timing: the 2 cores were shared with other jobs (other engineers' tests and a "
            f"background job), and the commands ran under nice -n {a.nice}; peak_rss_mb is the peak of the summed "
            "RSS of the process tree (time, python, workers) sampled every 0.5 s (or time -v's single-process "
            "maximum when larger: sampling can miss a short peak), an upper bound since pages shared by forked "
            "workers count in each; peak_pss_mb shares them out; max_single_rss_mb is "
            "/usr/bin/time's maximum resident set size (the largest single process); cpu_s is user+sys of "
            "the command and the workers it waited for" + (f"; {a.notes}" if a.notes else "")
        ),
        "goal": {"peak_rss_mb_at_most": 2048},
        "runs": runs,
        **({"shards_sha256_equal_to_first_run": shards_equal} if shards_equal is not None else {}),
        "prepared": {
            "vocab": str(vocab),
            "data": str(data),
            "documents": manifest["documents"],
            "sentences": manifest["sentences"],
            "tokens": manifest["tokens"],
            "text_bytes": manifest["text_bytes"],
            "shards": len(manifest["shards"]),
        },
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    from bertkit.io import atomic_write_json

    atomic_write_json(a.json, doc)
    print(json.dumps({k: doc[k] for k in ("commit", "prepared")} | {"runs": [
        {k: r[k] for k in ("command", "wall_s", "cpu_s", "peak_rss_mb", "max_single_rss_mb")} for r in runs
    ]}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
