"""``make bench``: every benchmark side by side with its reference, one summary line each, ending in
``ratio=X.XX`` (ours/reference speed, higher is better), and ``bench/results.json`` (written atomically).

    .venv/bin/python -m benchmarks.run [--quick] [--threads 2] [--only encoder tokenizer ...] [--doc docs/results/performance.md]
        [--jsonl rows.jsonl] [--set SUITE.KEY=VALUE ...] [--peaks-from FILE] [--env-only]

The run starts by recording the CPU model and ISA flags and measuring the machine's fp32 (and, with native
bf16, bf16) GEMM peak with a large matmul; each training and inference row then reports its achieved model
FLOP/s as a fraction of that peak. ``--doc`` rewrites docs/results/performance.md's results section from the
output file (``benchmarks/report.py``).

Suites (each a module exposing ``run(args)``: a list of rows, or a generator that yields each row as it is
measured; a row has at least ``name`` and ``ratio``, or ``skipped``/``error`` with a reason):

- ``encoder``   benchmarks.bench_encoder   inference, MiniLM and BERT-base, SST-2/CoNLL batches of 32
- ``tokenizer`` benchmarks.bench_tokenizer batch encoding vs BertTokenizerFast and raw ``tokenizers``
- ``finetune``  benchmarks.bench_finetune  SQuAD-shaped 8x384 QA step and SST-2 classification step
- ``pretrain``  benchmarks.bench_pretrain  pre-training step, BERT-mini/small, 32x128 (pretraining engineer)
- ``electra``   benchmarks.bench_electra   ELECTRA step (generator + discriminator), BERT-mini/small, 32x128, vs
                                           transformers' ElectraForMaskedLM + ElectraForPreTraining
- ``data``      benchmarks.bench_data      prepare + instances vs the original algorithm (data engineer)
- ``gpu``       benchmarks.bench_gpu       BERT-base bf16 pre-training step on CUDA: tokens/s and MFU
                                           (a skipped row on a machine without a CUDA device)
- ``serve``     benchmarks.bench_serve     ``bertkit serve`` /embed on loopback at concurrency 1/16/64, batching
                                           on/off, vs sentence-transformers behind FastAPI (serve engineer)
- ``index``     benchmarks.bench_index     1M x 384 vectors: FAISS flat / HNSW / IVF-PQ vs exact search (QPS, recall@10)
- ``embed_train`` benchmarks.bench_embed_train  train-embed vs sentence-transformers' trainer (pairs/s, quality)
- ``modernbert`` benchmarks.bench_modernbert  ModernBERT-base shape vs transformers': SST-2/CoNLL batches of 32,
                                           4,096- and 8,192-token documents (peak memory), an MLM step

Every run pins torch's threads (``--threads``, default 2: the target machine has 2 cores), sets the
tokenizers' Rust pool to the same size (``RAYON_NUM_THREADS``) and gets OpenMP's wait policy as every user
of the ``bertkit`` command does, before torch starts (``benchmarks/__init__.py``; ``bertkit.tuning.omp_wait_policy``: idle threads sleep,
``PASSIVE``, only when the machine is already saturated by other work; else OpenMP's default; a user's
``OMP_WAIT_POLICY`` wins). The run records which was in effect. Outputs are checked equal before anything is timed; a mismatch is
reported and makes the exit status 1. Offline: inputs come from ../shared/data and the installed
all-MiniLM-L6-v2 package (or ``$BERTKIT_BENCH_DATA`` and ``$BERTKIT_BENCH_MINILM``: ``benchmarks/inputs.py``;
the environment records which MiniLM, and rows measured on stand-in weights carry ``minilm_weights``).

For a run that a time limit may stop (``benchmarks/cpu_checks.sh`` on a lent machine): ``--jsonl`` appends each
row to a file as soon as its suite gives it (per row for suites whose ``run`` yields, else per suite), after a
first line ``{"environment": ...}`` and before a last ``{"end": ...}``; ``--set`` changes one setting of one
suite (``--set pretrain.ours_only_sizes=[]``; the value is read as JSON, else taken as a string);
``--env-only`` records the environment and GEMM peaks and runs no suite; ``--peaks-from`` takes the peaks from
an earlier run's ``--out`` or ``--jsonl`` file instead of measuring them again (a few seconds per run).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SUITES = (
    "encoder",
    "tokenizer",
    "finetune",
    "pretrain",
    "electra",
    "data",
    "gpu",
    "serve",
    "index",
    "embed_train",
    "modernbert",
)
ROOT = Path(__file__).resolve().parents[1]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a fast smoke run: fewer inputs and repeats")
    p.add_argument("--threads", type=int, default=2, help="torch and Rust threads (default 2)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per side (default per benchmark)")
    p.add_argument("--only", nargs="+", choices=SUITES, default=None, help="run only these suites")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    p.add_argument(
        "--doc",
        type=Path,
        default=None,
        help="also rewrite the results section of this markdown file (docs/results/performance.md) from --out",
    )
    p.add_argument(
        "--jsonl",
        type=Path,
        default=None,
        help="also append each row to this file as soon as it is measured (first line: the environment)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SUITE.KEY=VALUE",
        help="one suite setting (VALUE read as JSON, else a string), e.g. pretrain.ours_only_sizes=[]",
    )
    p.add_argument(
        "--peaks-from",
        type=Path,
        default=None,
        help="take the GEMM peaks from this earlier --out or --jsonl file instead of measuring them",
    )
    p.add_argument("--env-only", action="store_true", help="record the environment and GEMM peaks only")
    args = p.parse_args(argv)
    try:
        args.overrides = parse_overrides(args.overrides)
    except ValueError as e:
        p.error(str(e))
    return args


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["pretrain.sizes=[\"mini\"]", ...]`` -> ``{"pretrain": {"sizes": ["mini"]}}``; ValueError names a bad one."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        suite, dot, name = key.partition(".")
        if not eq or not dot or not name:
            raise ValueError(f"--set {item!r}: expected SUITE.KEY=VALUE")
        if suite not in SUITES:
            raise ValueError(f"--set {item!r}: no suite {suite!r} (suites: {', '.join(SUITES)})")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw  # a bare word: a string
        out.setdefault(suite, {})[name] = value
    return out


def _with_overrides(suite_args: Any, overrides: dict[str, Any]) -> Any:
    """The suite's arguments with ``--set`` values put in (a suite takes a namespace or a dict)."""
    if isinstance(suite_args, dict):
        return {**suite_args, **overrides}
    for name, value in overrides.items():
        setattr(suite_args, name, value)
    return suite_args


def peaks_from(path: Path) -> dict[str, Any]:
    """The GEMM peaks an earlier run recorded: its ``--out`` JSON or the environment line of its ``--jsonl``."""
    text = path.read_text(encoding="utf-8")
    try:
        records = [json.loads(text)]
    except ValueError:  # JSON lines
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    for record in records:
        peak = (record.get("environment") or {}).get("gemm_peak")
        if peak:
            return peak
    raise ValueError(f"{path}: no environment record with gemm_peak")


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, flushed and synced at once: a process killed a moment later keeps it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _suite_args(name: str, args: argparse.Namespace) -> Any:
    """What each suite's ``run`` takes (the data and pretraining suites document their own keys)."""
    if name == "pretrain":
        d: dict[str, Any] = {"threads": args.threads}
        if args.quick:
            d.update(sizes=["mini"], repeats=args.repeats or 3, warmup=1, ours_only_sizes=[])
        elif args.repeats:
            d["repeats"] = args.repeats
        return argparse.Namespace(**d)
    if name == "electra":
        d = {"threads": args.threads}
        if args.quick:
            d.update(sizes=["mini"], repeats=args.repeats or 3, warmup=1, mixed=[])
        elif args.repeats:
            d["repeats"] = args.repeats
        return d
    if name == "gpu":
        return {"repeats": args.repeats or (3 if args.quick else 10), "warmup": 1 if args.quick else 3}
    if name == "data":
        return {"quick": args.quick, "workers": args.threads, "repeats": args.repeats}
    return argparse.Namespace(quick=args.quick, threads=args.threads, repeats=args.repeats)


def _normalise(row: dict[str, Any], suite: str) -> dict[str, Any]:
    row = dict(row)
    row.setdefault("suite", suite)
    if "ours_per_s" not in row and isinstance(row.get("ours"), (int, float)):
        row.setdefault("ours_value", row["ours"])
    return row


def summary(row: dict[str, Any]) -> str:
    from .common import summary_line

    if "ours_per_s" in row or "error" in row:
        return summary_line(row)
    parts = [f"{row.get('name', '?'):<34}"]
    if row.get("skipped"):
        parts.append(f"SKIPPED ({row['skipped']})")
    unit = row.get("unit", "")
    if row.get("ours") is not None:
        ref = row.get("reference")
        parts.append(f"ours {row['ours']} {unit}  ref {ref if ref is not None else 'n/a'} {unit}")
    for k in ("peak_mb", "ours_peak_mb"):
        if row.get(k) is not None:
            parts.append(
                f"peak {row[k]} MB"
                + (f" / ref {row['reference_peak_mb']} MB" if row.get("reference_peak_mb") else "")
            )
            break
    if row.get("goal") is not None:
        parts.append(f"goal {row['goal']}")
    ratio = row.get("ratio")
    parts.append(f"ratio={ratio:.2f}" if isinstance(ratio, (int, float)) else "ratio=n/a")
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # Thread settings go before torch / tokenizers start their pools. OMP_WAIT_POLICY was decided when the
    # benchmarks package was imported, as the `bertkit` command decides it (benchmarks/__init__.py).
    #
    # The per-machine kernel choices (bertkit/tuning.py) are measured afresh in this run, at first use as for
    # any user, into a cache of the run's own (a choice cached at a busier moment must not decide the run's
    # numbers); what was chosen is recorded with the results.
    if "BERTKIT_CACHE_DIR" not in os.environ:
        os.environ["BERTKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="bertkit-bench-choices-")
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:  # transformers' own weight-loading bars would interleave with the summary lines
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass

    from bertkit.io import atomic_write_json

    from .below_peak import explain as explain_below_half
    from .common import Mismatch, add_fraction_of_peak, environment, machine_peaks, pin_threads
    from .inputs import minilm_record

    threads = pin_threads(args.threads)
    env = environment()
    env["minilm"] = minilm_record()  # which weights: real, or a stand-in of random ones (speed only)
    # the ceiling: the machine's GEMM FLOP/s with a large matmul at these threads (each training and
    # inference row reports its achieved model FLOP/s as a fraction of it)
    if args.peaks_from is not None:
        env["gemm_peak"] = peaks_from(args.peaks_from)
        env["gemm_peak_from"] = str(args.peaks_from)
    else:
        env["gemm_peak"] = machine_peaks()
    print(
        f"bertkit benchmarks: {env['cpu']} ({env['cpu_count']} cpus), torch threads pinned to {threads}, "
        f"RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}, OMP_WAIT_POLICY={env['omp_wait_policy']}, "
        f"load {env['load_average']}, torch {env['torch']}, transformers {env['transformers']}"
        + (" [quick]" if args.quick else ""),
        flush=True,
    )
    print(
        f"ISA {' '.join(env['isa_flags'])}; GEMM peak "
        + ", ".join(f"{k} {v['flops_per_s'] / 1e9:.0f} GFLOP/s" for k, v in env["gemm_peak"].items()),
        flush=True,
    )
    results: list[dict[str, Any]] = []
    failed = False
    started = time.perf_counter()
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.jsonl is not None:
        append_jsonl(args.jsonl, {"environment": env, "command": command.strip(), "quick": args.quick})

    def write(complete: bool) -> None:
        """bench/results.json after every row (atomic), so a cut-short run still leaves its numbers."""
        from bertkit.tuning import cached_choices

        env["kernel_choices"] = {k: v.get("choice") for k, v in cached_choices().items()}
        report = {
            "environment": env,
            "command": command.strip(),
            "quick": args.quick,
            "complete": complete,
            "seconds": round(time.perf_counter() - started, 1),
            "results": results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.out, report)

    def emit(row: dict[str, Any], suite: str, t0: float) -> None:
        """One finished row: kept, printed, and in --out and --jsonl at once."""
        row = _normalise(row, suite)
        add_fraction_of_peak(row, env["gemm_peak"])
        explain_below_half(row, env, measure=args.peaks_from is None)  # a GEMM timed here, against this peak
        row.setdefault("suite_seconds", round(time.perf_counter() - t0, 1))  # from the suite's start
        results.append(row)
        print(summary(row), flush=True)
        if row.get("below_half_reason"):
            print(
                f"    below half the {row.get('ours_peak_dtype', 'fp32')} peak: {row['below_half_reason']}",
                flush=True,
            )
        if args.jsonl is not None:
            append_jsonl(args.jsonl, row)
        write(complete=False)

    for suite in [] if args.env_only else args.only or SUITES:
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(f"benchmarks.bench_{suite}")
        except ImportError as e:
            emit({"name": suite, "skipped": f"benchmarks/bench_{suite}.py not importable: {e}"}, suite, t0)
            continue
        suite_args = _with_overrides(_suite_args(suite, args), args.overrides.get(suite, {}))
        try:
            for row in module.run(suite_args):  # a generator gives each row as it is measured
                emit(row, suite, t0)
        except Mismatch as e:
            failed = True
            emit({"name": suite, "error": f"outputs differ: {e}"}, suite, t0)
        except Exception as e:  # one broken suite must not hide the others' numbers
            name = type(e).__name__
            skipped = name == "NoData"
            failed = failed or not skipped
            traceback.print_exc(limit=4)
            emit({"name": suite, ("skipped" if skipped else "error"): f"{name}: {e}"}, suite, t0)
        pin_threads(args.threads)  # a suite may have changed it
    total = time.perf_counter() - started
    write(complete=True)
    if args.jsonl is not None:
        append_jsonl(
            args.jsonl, {"end": {"complete": True, "seconds": round(total, 1), "rows": len(results)}}
        )
    print(f"wrote {args.out} ({len(results)} results, {total:.0f} s)", flush=True)
    if args.doc is not None:
        from .report import update

        update(args.doc, json.loads(args.out.read_text(encoding="utf-8")), str(args.out))
        print(f"wrote the results section of {args.doc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
