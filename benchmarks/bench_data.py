"""Benchmark: `prepare` + instance creation against the original release's create_pretraining_data.py.

Run: ``BERT_ORIGINAL_DIR=/path/to/bert .venv/bin/python -m benchmarks.bench_data [--quick] [--workers 2]``
(``benchmarks.run`` calls :func:`run`). Without ``BERT_ORIGINAL_DIR`` only our numbers are reported.
``--golden`` re-derives the static-parity fingerprints of tests/test_data_instances.py with the original.

Getting the original (it is not part of bertkit and is never copied into it): any checkout of
https://github.com/google-research/bert, e.g. ``git clone https://github.com/google-research/bert /tmp/bert``,
or from a stored snapshot: ``git --git-dir=MIRROR show HEAD:create_pretraining_data.py > /tmp/bert/...`` (and
``tokenization.py``). The original imports ``tensorflow`` (only for flags, file reading and logging) and
``six``; this benchmark loads it with tiny stand-ins for both, so neither needs to be installed.

Each side runs in its own cold subprocess (``--repeats`` rounds, default 3, alternating the order; the median
run counts; the clock starts after the side's imports and a garbage collection, see :func:`_settled`) on the
same corpus (the Gutenberg books of ../shared/data, as the
original's format: one sentence per line, a blank line between books) and reports wall time, MB/s of corpus
text, and peak anonymous memory (Pss_Anon of the process and its workers, sampled; memory-mapped shard
pages are file-backed cache and not counted). Rows:

- ``default path``: ours = ``prepare --workers N`` + one epoch of dynamic instances collated into batches,
  reference = the original end to end (its tokenizer + ``create_training_instances`` with dupe_factor 1 +
  conversion to ids, i.e. everything but the TFRecord write). Goal: ratio >= 10.
- ``default path on the corpus x3``: the same on the corpus repeated three times (one run each side), where
  fixed costs (start-up, tokenizer, cold caches) weigh a third as much.
- ``static path``: ours = ``prepare --workers 1`` + ``create_static_from_shards`` (dupe_factor 1, the
  original's exact stream, written to .npz) vs the same reference. Goal: ratio >= 1.
- ``static algorithm``: instance creation alone on the same tokenized documents (ours on strings vs the
  original's functions), with the streams checked identical. Goal: ratio >= 1.
- ``peak memory growth``: peak memory on the corpus repeated 3 times / on the corpus, ours vs the original.

Latest (a 2-core Intel Xeon, family 6 model 207; ``make bench``'s rows with ``BERT_ORIGINAL_DIR`` set, load 4-5
from another session's jobs; docs/perf/bench-data-intel-6-207-a5be8d0.json and ``-quick.json``): default path
8.23x with 2 prepare workers (5.04 vs 0.61 MB/s), 10.32x with 1, 11.78x on the corpus x3; static path 5.57x;
``--quick`` (one shard) 7.73x with 2 workers, 7.53x with 1. On a slice of corpus-large see
:mod:`benchmarks.bench_data_large`.

Why ``--workers 2`` gained less than ``--workers 1`` on Intel hosts (each measured on that Xeon):

- the quick corpus (2.4 MB) is one 4 MB shard, and ``--workers 2`` started a pool for it (fork, documents
  pickled to a cold worker); prepare clamps the workers to the shards now and builds one shard in-process;
- the tokenizer's plain-text pipeline was chosen at first use in every process: the choice imports torch for its
  per-machine cache key (~1 CPU-s per worker where the parent has no torch, as in ``bertkit prepare``) and, on a
  machine without a cached choice (a fresh device host; the data children pin torch to 1 thread, a key no
  other step fills), first measures both pipelines (0.7 s), inside a worker when there are workers.
  ``load_tokenizer`` now hands the shard builders the pipeline already chosen;
- each worker's chunk cache started empty and tokenized again the words all shards share (0.31-0.48 CPU-s for
  the second shard, cold, against 0.23-0.27 warm): the parent now tokenizes the first shard's words once and
  the forked workers inherit them;
- the parent, which feeds every worker, read the corpus a line at a time (0.18 s per 22 MB; now 0.06 s in
  blocks);
- on a shared host, Linux's autogroup scheduler divides the CPU between sessions, not by ``nice``: beside
  another session's busy jobs, two processes of one session get what one gets (a busy loop: 2.0 CPU-s in 3 s
  alone, 1.0 each as two), so a second worker adds only its overhead. The Rust tokenizer's own threads
  (``TOKENIZERS_PARALLELISM``) made no difference to prepare's blocks (0.14 s either way for 49k words).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import random
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

from .inputs import SHARED_DATA  # ../shared/data, or $BERTKIT_BENCH_DATA

ROOT = Path(__file__).resolve().parents[1]
VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased-vocab.txt"


# --- the original, loaded with stand-ins for tensorflow and six ---------------------------------------


def load_original(path: str | os.PathLike):
    """Import the original ``create_pretraining_data`` and ``tokenization`` modules from ``path``."""
    if "tensorflow" not in sys.modules:
        tf = types.ModuleType("tensorflow")
        flags_obj = types.SimpleNamespace()

        def define(name, default, *a, **k):
            setattr(flags_obj, name, default)

        tf.flags = types.SimpleNamespace(
            FLAGS=flags_obj,
            DEFINE_string=define,
            DEFINE_bool=define,
            DEFINE_integer=define,
            DEFINE_float=define,
            mark_flag_as_required=lambda *a: None,
        )
        tf.gfile = types.SimpleNamespace(GFile=open, Glob=lambda p: [p])
        tf.logging = types.SimpleNamespace(info=lambda *a, **k: None, set_verbosity=lambda *a: None, INFO=0)
        sys.modules["tensorflow"] = tf
    if "six" not in sys.modules:
        six = types.ModuleType("six")
        six.PY2, six.PY3, six.text_type, six.binary_type = False, True, str, bytes
        sys.modules["six"] = six
    sys.path.insert(0, str(path))
    try:
        tokenization = importlib.import_module("tokenization")
        cpd = importlib.import_module("create_pretraining_data")
    finally:
        sys.path.remove(str(path))
    return cpd, tokenization


# --- memory sampling ------------------------------------------------------------------------------------


def _anon_kb(pid: int) -> int:
    """Proportional anonymous memory (Pss_Anon: pages shared copy-on-write with forked workers count once)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakMemory:
    """Samples Pss_Anon of this process + its children every 250 ms; ``peak_mb`` once done."""

    def __init__(self):
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _children(self) -> list[int]:
        try:
            with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def _loop(self):
        while not self._stop.is_set():
            kb = _anon_kb(os.getpid()) + sum(_anon_kb(c) for c in self._children())
            self.peak_kb = max(self.peak_kb, kb)
            self._stop.wait(0.25)  # reading smaps_rollup costs ~10 ms: sample sparsely

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def peak_mb(self) -> float:
        return round(self.peak_kb / 1024, 1)


# --- one measurement per subprocess -------------------------------------------------------------------


def arrays_sha256(arrays: dict) -> str:
    """A fingerprint of static instances as the original's features (each array's name, shape and int64
    values, in :data:`bertkit.data.static.FEATURES` order), whatever dtype each side stores them in."""
    import hashlib

    import numpy as np

    from bertkit.data.static import FEATURES

    h = hashlib.sha256()
    for key in FEATURES:
        arr = np.ascontiguousarray(arrays[key], dtype=np.int64)
        h.update(f"{key}{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _settled() -> None:
    """Collect the garbage a side's imports left before its clock starts. Why: after ``import torch`` (the
    default side's DataLoader; ~170k objects) a full collection is due, and the first ~5k objects allocated
    afterwards set it off: 0.075-0.09 CPU-s on the Xeon, a cost of the import that fell inside the timed
    region of whichever side had imported torch. The reference side imports no torch; for it this is ~0."""
    gc.collect()


def _measure(
    mode: str,
    corpus: str,
    workers: int,
    max_seq_length: int,
    original: str | None,
    fingerprint: bool = False,
    static_workers: int = 1,
) -> dict:
    """One side's run on ``corpus`` (timed), and with ``fingerprint`` (untimed) the sha256 of its static
    instances' arrays (modes original and static)."""
    mb = Path(corpus).stat().st_size / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "original":
            cpd, tokenization = load_original(original)
            _settled()
            with PeakMemory() as mem:
                t0 = time.perf_counter()
                tok = tokenization.FullTokenizer(vocab_file=str(VOCAB), do_lower_case=True)
                insts = cpd.create_training_instances(
                    [corpus], tok, max_seq_length, 1, 0.1, 0.15, 20, random.Random(12345)
                )
                n_ids = sum(len(tok.convert_tokens_to_ids(i.tokens)) for i in insts)
                seconds = time.perf_counter() - t0
            extra = {"instances": len(insts), "tokens": n_ids}
            if fingerprint:
                from bertkit.data.instances import instances_to_arrays

                arrays = instances_to_arrays(insts, max_seq_length, 20, tok.vocab)
                extra["arrays_sha256"] = arrays_sha256(arrays)
        elif mode == "default":
            import torch

            from bertkit.data import PretrainingDataset, prepare

            torch.set_num_threads(1)
            _settled()
            with PeakMemory() as mem:
                t0 = time.perf_counter()
                prepare([corpus], VOCAB, Path(tmp) / "d", max_seq_length, workers=workers, progress=False)
                t1 = time.perf_counter()
                ds = PretrainingDataset(Path(tmp) / "d", max_seq_length, split="all")
                loader = torch.utils.data.DataLoader(ds, batch_size=32, collate_fn=ds.collate)
                n = tokens = 0
                for batch in loader:
                    n += batch["input_ids"].shape[0]
                    tokens += int(batch["attention_mask"].sum())
                seconds = time.perf_counter() - t0
            extra = {"instances": n, "tokens": tokens, "prepare_s": round(t1 - t0, 3)}
        elif mode == "static":
            from bertkit.data import create_static_from_shards, load_static_instances, prepare

            _settled()
            with PeakMemory() as mem:
                t0 = time.perf_counter()
                prepare(
                    [corpus], VOCAB, Path(tmp) / "d", max_seq_length, workers=static_workers, progress=False
                )
                t1 = time.perf_counter()
                res = create_static_from_shards(Path(tmp) / "d", Path(tmp) / "s.npz", max_seq_length, 1)
                seconds = time.perf_counter() - t0
            extra = {"instances": res["instances"], "prepare_s": round(t1 - t0, 3), "workers": static_workers}
            if fingerprint:
                extra["arrays_sha256"] = arrays_sha256(load_static_instances(Path(tmp) / "s.npz"))
        else:
            raise ValueError(mode)
    return {"mode": mode, "seconds": round(seconds, 3), "mb": round(mb, 3), "peak_mb": mem.peak_mb, **extra}


def _subprocess(mode: str, corpus: Path, args) -> dict:
    from .common import child_json

    measure = ["--_measure", mode, "--_corpus", str(corpus), "--workers", str(args.workers)]
    return child_json(["-m", "benchmarks.bench_data", *measure, "--max-seq-length", str(args.max_seq_length)])


def _algorithm(corpus: Path, original: str | None, dupe_factor: int = 1, repeat: int = 3) -> dict:
    """Instance creation alone, same tokenized documents, same seed: ours vs the original's functions
    (best of ``repeat`` runs each, alternating, to damp noise from a shared machine)."""
    from bertkit.data import create_training_instances, instances_sha256, read_documents
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer(str(VOCAB), lowercase=True)
    vocab_words = tok.ids_to_tokens
    docs = [
        [[vocab_words[i] for i in ids] for ids in tok.encode_batch_ids(doc, add_special_tokens=False) if ids]
        for doc in read_documents([corpus])
    ]
    ours_s = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        ours = create_training_instances(
            docs, vocab_words, 128, dupe_factor, 0.1, 0.15, 20, random.Random(12345)
        )
        ours_s = min(ours_s, time.perf_counter() - t0)
    row = {"ours_s": ours_s, "instances": len(ours), "ref_s": None, "identical": None}
    if original:
        cpd, _ = load_original(original)
        cpd.FLAGS.do_whole_word_mask = False
        row["ref_s"] = float("inf")
        for _ in range(repeat):
            rng = random.Random(12345)
            t0 = time.perf_counter()
            all_docs = [[list(s) for s in d] for d in docs]
            rng.shuffle(all_docs)
            ref = []
            for _ in range(dupe_factor):
                for i in range(len(all_docs)):
                    ref.extend(
                        cpd.create_instances_from_document(all_docs, i, 128, 0.1, 0.15, 20, vocab_words, rng)
                    )
            rng.shuffle(ref)
            row["ref_s"] = min(row["ref_s"], time.perf_counter() - t0)
        row["identical"] = instances_sha256(ref) == instances_sha256(ours)
    return row


def _corpus_file(tmp: Path, fraction: float, copies: int = 1) -> Path:
    """The Gutenberg books (a leading ``fraction`` of them, ``copies`` times) in the original's format."""
    books = sorted((SHARED_DATA / "corpus" / "gutenberg").glob("*.txt"))
    books = books[: max(1, round(len(books) * fraction))]
    out = tmp / f"gutenberg_{len(books)}x{copies}.txt"
    with open(out, "w", encoding="utf-8") as f:
        for _ in range(copies):
            for b in books:
                f.write(b.read_text(encoding="utf-8").rstrip("\n") + "\n\n")
    return out


def _row(name, ours, ref, unit, higher_is_better=True, **extra) -> dict:
    ratio = None
    if ours is not None and ref:
        ratio = round(ours / ref if higher_is_better else ref / ours, 2)
    return {"name": name, "ours": ours, "reference": ref, "unit": unit, "ratio": ratio, **extra}


def run(args=None) -> list[dict]:
    """All rows (see the module docstring). ``args``: namespace/dict with workers, quick, max_seq_length."""
    ns = argparse.Namespace(workers=2, quick=False, max_seq_length=128, repeats=None)
    if args is not None:
        for k, v in (vars(args) if not isinstance(args, dict) else args).items():
            setattr(ns, k, v)
    ns.repeats = ns.repeats or (1 if ns.quick else 3)
    original = os.environ.get("BERT_ORIGINAL_DIR")
    if not SHARED_DATA.is_dir():
        return [{"name": "data", "skipped": f"no shared data at {SHARED_DATA}"}]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        full = _corpus_file(Path(tmp), 0.35 if ns.quick else 1.0)
        big = _corpus_file(Path(tmp), 0.35 if ns.quick else 1.0, copies=3)
        one = argparse.Namespace(**{**vars(ns), "workers": 1})
        # Each measurement is a cold process (prepare is a one-time job: no warm caches), repeated and
        # alternated (the order reversed every other round) so drifting load hits every side alike; the
        # run with the median time stands for each side.
        sides = {"default": ("default", ns), "default1": ("default", one), "static": ("static", ns)}
        if original:
            sides["original"] = ("original", ns)
        runs: dict[str, list[dict]] = {key: [] for key in sides}
        for r in range(ns.repeats):
            for key in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                runs[key].append(_subprocess(sides[key][0], full, sides[key][1]))
        res = {key: sorted(rs, key=lambda x: x["seconds"])[len(rs) // 2] for key, rs in runs.items()}
        for key, rs in runs.items():
            res[key]["all_seconds"] = [x["seconds"] for x in rs]
        big_res = {"default": _subprocess("default", big, ns)}
        if original:
            big_res["original"] = _subprocess("original", big, ns)
        ref = res.get("original")
        mbps = {m: r["mb"] / r["seconds"] for m, r in res.items()}
        ref_mbps = round(mbps["original"], 3) if ref else None
        ref_peak = ref and ref["peak_mb"]
        for key, label in (("default", f"workers={ns.workers}"), ("default1", "workers=1")):
            rows.append(
                _row(
                    f"default path: prepare ({label}) + one epoch of dynamic instances",
                    round(mbps[key], 3),
                    ref_mbps,
                    "MB/s",
                    peak_mb=res[key]["peak_mb"],
                    reference_peak_mb=ref_peak,
                    corpus_mb=res[key]["mb"],
                    prepare_s=res[key]["prepare_s"],
                    seconds=res[key]["seconds"],
                    reference_seconds=ref and ref["seconds"],
                    all_seconds=res[key]["all_seconds"],
                    reference_all_seconds=ref and ref["all_seconds"],
                    goal=">= 10",
                )
            )
        big_ref = big_res.get("original")
        rows.append(  # the fixed costs (process start-up, tokenizer, cold caches) weigh less on a larger corpus
            _row(
                f"default path on the corpus x3: prepare (workers={ns.workers}) + one epoch",
                round(big_res["default"]["mb"] / big_res["default"]["seconds"], 3),
                big_ref and round(big_ref["mb"] / big_ref["seconds"], 3),
                "MB/s",
                corpus_mb=big_res["default"]["mb"],
                seconds=big_res["default"]["seconds"],
                reference_seconds=big_ref and big_ref["seconds"],
                goal=">= 10",
            )
        )
        rows.append(
            _row(
                "static path: prepare (workers=1) + the original's stream to .npz",
                round(mbps["static"], 3),
                ref_mbps,
                "MB/s",
                peak_mb=res["static"]["peak_mb"],
                reference_peak_mb=ref_peak,
                goal=">= 1",
            )
        )
        alg = _algorithm(full, original)
        rows.append(
            _row(
                "static algorithm: instance creation on the same tokens",
                round(alg["instances"] / alg["ours_s"], 1),
                alg["ref_s"] and round(alg["instances"] / alg["ref_s"], 1),
                "instances/s",
                identical_stream=alg["identical"],
                goal=">= 1",
            )
        )
        growth = big_res["default"]["peak_mb"] / max(res["default"]["peak_mb"], 1e-9)
        ref_growth = ref and big_res["original"]["peak_mb"] / max(ref["peak_mb"], 1e-9)
        rows.append(
            _row(
                "peak memory growth, corpus x3 (default path vs the original)",
                round(growth, 2),
                ref_growth and round(ref_growth, 2),
                "x",
                higher_is_better=False,
                corpus_mb=(res["default"]["mb"], big_res["default"]["mb"]),
                ours_peak_mb=(res["default"]["peak_mb"], big_res["default"]["peak_mb"]),
                reference_peak_mb=ref and (ref["peak_mb"], big_res["original"]["peak_mb"]),
                goal="~1 (flat)",
            )
        )
    return rows


def golden(original: str) -> list[dict]:
    """Re-derive the parity fingerprints of tests/test_data_instances.py with the original script itself
    (its FullTokenizer and create_training_instances, on the same corpora and parameters)."""
    import hashlib
    import importlib.util

    from bertkit.data import instances_sha256

    spec = importlib.util.spec_from_file_location("_golden_cases", ROOT / "tests" / "test_data_instances.py")
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    cpd, tokenization = load_original(original)
    tok = tokenization.FullTokenizer(vocab_file=str(VOCAB), do_lower_case=True)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, seed, msl, dupe, short, mlm, maxpred, wwm, n, sha in cases.GOLDEN:
            corpus = cases.golden_corpus(name, SHARED_DATA, Path(tmp))
            cpd.FLAGS.do_whole_word_mask = wwm
            insts = cpd.create_training_instances(
                [str(corpus)], tok, msl, dupe, short, mlm, maxpred, random.Random(seed)
            )
            docs, doc = [], []
            with open(corpus, encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        docs.append(doc)
                        doc = []
                    elif t := tok.tokenize(line.strip()):
                        doc.append(t)
            docs = [d for d in [*docs, doc] if d]
            got = instances_sha256(insts)
            out.append(
                {
                    "case": f"{name}-seed{seed}",
                    "instances": len(insts),
                    "sha256": got,
                    "matches_test": got == sha and len(insts) == n,
                    "docs_sha256_matches": hashlib.sha256(json.dumps(docs).encode()).hexdigest()
                    == cases.DOCS_SHA[name],
                }
            )
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--quick", action="store_true", help="a third of the corpus, one round")
    p.add_argument("--repeats", type=int, default=None, help="cold runs per side, median taken (default 3)")
    p.add_argument("--golden", action="store_true", help="re-derive the parity test's fingerprints")
    p.add_argument("--_measure", help=argparse.SUPPRESS)
    p.add_argument("--_corpus", help=argparse.SUPPRESS)
    p.add_argument("--_fingerprint", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--_static-workers", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.golden:
        if not os.environ.get("BERT_ORIGINAL_DIR"):
            sys.exit("--golden needs BERT_ORIGINAL_DIR (a checkout of google-research/bert)")
        for row in golden(os.environ["BERT_ORIGINAL_DIR"]):
            print(json.dumps(row))
        return
    if a._measure:
        original = os.environ.get("BERT_ORIGINAL_DIR")
        r = _measure(
            a._measure, a._corpus, a.workers, a.max_seq_length, original, a._fingerprint, a._static_workers
        )
        print(json.dumps(r))
        return
    for row in run(a):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
