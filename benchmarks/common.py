"""The timing harness every benchmark uses: pinned threads, equality first, warm-up, alternating
ours/reference, median of repeats, peak memory.

A benchmark module exposes ``run(args) -> list[dict]``; each dict is one result made by
:func:`compare` (or by hand with the same keys: ``name`` and ``ratio`` are required, ``ratio`` is
ours/reference speed, higher is better). ``args`` carries ``quick`` (bool), ``threads`` (int),
``repeats`` (int or None = the benchmark's default) and ``only`` (names to run or None).

How a comparison is measured (:func:`compare`):
1. the caller checks outputs equal (token ids identical, tensors within a tolerance) BEFORE any
   timing, with :func:`check_close` / :func:`check_equal`, which raise :class:`Mismatch`;
2. each side runs ``warmup`` times (allocator, caches, lazy init);
3. ``repeats`` rounds alternate the two sides (ours first on even rounds, reference first on odd
   ones) so drifting load from other processes hits both alike; each round times ``inner`` calls;
4. the result is the median seconds per call of each side, ratio = reference / ours;
5. peak memory: the largest resident-set growth over one call of each side, sampled every
   millisecond from /proc/self/statm after returning freed memory to the OS (``malloc_trim``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch


class Mismatch(AssertionError):
    """Ours and the reference disagree: the benchmark is not comparing the same work."""


# ----------------------------------------------------------------------------------- environment
def pin_threads(threads: int) -> int:
    """Pin torch's intra-op threads (and inter-op to 1); returns the number in effect."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass
    return torch.get_num_threads()


def environment() -> dict[str, Any]:
    """What the numbers were measured on."""
    import tokenizers
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


# ----------------------------------------------------------------------------------------- checks
def check_equal(ours: Any, ref: Any, what: str) -> str:
    """Exact equality (token ids, lists); raises :class:`Mismatch` naming ``what``."""
    if isinstance(ours, torch.Tensor) or isinstance(ref, torch.Tensor):
        same = torch.equal(torch.as_tensor(ours), torch.as_tensor(ref))
    else:
        same = ours == ref
    if not same:
        raise Mismatch(f"{what}: ours and the reference differ")
    return "identical"


def check_close(
    ours: torch.Tensor, ref: torch.Tensor, atol: float, what: str, mask: torch.Tensor | None = None
) -> float:
    """max |ours - ref| (over ``mask``'s True positions when given) must be <= atol; returns it."""
    ours, ref = ours.detach().float(), ref.detach().float()
    if ours.shape != ref.shape:
        raise Mismatch(f"{what}: shapes differ, ours {tuple(ours.shape)} vs reference {tuple(ref.shape)}")
    diff = (ours - ref).abs()
    if mask is not None:
        diff = diff[mask.bool()]
    worst = float(diff.max()) if diff.numel() else 0.0
    if not worst <= atol:  # also catches NaN
        raise Mismatch(f"{what}: max abs difference {worst:.3g} > tolerance {atol:g}")
    return worst


# ----------------------------------------------------------------------------------------- memory
_libc: Any = None


def _trim() -> None:
    """Collect garbage and hand freed heap pages back to the OS so RSS starts from the live set."""
    global _libc
    gc.collect()
    try:
        if _libc is None:
            _libc = ctypes.CDLL("libc.so.6")
        _libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory(fn: Callable[[], Any]) -> int:
    """Largest growth of the resident set (bytes) during one call of ``fn`` (sampled every ms)."""
    if not os.path.exists("/proc/self/statm"):
        return -1
    _trim()
    base = _rss_bytes()
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_bytes())
            time.sleep(0.001)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    peak = max(peak, _rss_bytes())
    return peak - base


# ----------------------------------------------------------------------------------------- timing
def compare(
    name: str,
    ours: Callable[[], Any],
    ref: Callable[[], Any],
    *,
    repeats: int,
    warmup: int = 1,
    inner: int = 1,
    items: float = 1.0,
    unit: str = "items",
    goal: float | None = None,
    check: str | float | None = None,
    memory: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Time ``ours`` against ``ref`` (each a no-argument callable doing ``items`` units of work).

    Call only after the outputs were checked equal. Returns the result dict (see the module doc).
    """
    for _ in range(warmup):
        ours()
        ref()
    times: dict[str, list[float]] = {"ours": [], "ref": []}
    sides = (("ours", ours), ("ref", ref))
    for r in range(repeats):
        for label, fn in sides if r % 2 == 0 else sides[::-1]:
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[label].append((time.perf_counter() - start) / inner)
    t_ours = statistics.median(times["ours"])
    t_ref = statistics.median(times["ref"])
    result: dict[str, Any] = {
        "name": name,
        "ratio": t_ref / t_ours,
        "ours_s": t_ours,
        "ref_s": t_ref,
        "ours_per_s": items / t_ours,
        "ref_per_s": items / t_ref,
        "unit": unit,
        "repeats": repeats,
        "inner": inner,
        "ours_times": times["ours"],
        "ref_times": times["ref"],
        "threads": torch.get_num_threads(),
        "goal": goal,
        "check": check,
    }
    if memory:
        result["ours_peak_mb"] = peak_memory(ours) / 2**20
        result["ref_peak_mb"] = peak_memory(ref) / 2**20
    if goal is not None:
        result["meets_goal"] = result["ratio"] >= goal
    if extra:
        result.update(extra)
    return result


def summary_line(result: dict[str, Any]) -> str:
    """One line per benchmark, ending in ``ratio=X.XX``."""
    parts = [f"{result['name']:<34}"]
    if "ours_per_s" in result:
        unit = result.get("unit", "items")
        parts.append(
            f"ours {result['ours_per_s']:>10.1f} {unit}/s  ref {result['ref_per_s']:>10.1f} {unit}/s"
        )
    if result.get("ours_peak_mb") is not None and result.get("ref_peak_mb") is not None:
        parts.append(f"peak {result['ours_peak_mb']:.0f}/{result['ref_peak_mb']:.0f} MB")
    if result.get("ours_mfu") is not None:
        parts.append(f"MFU {result['ours_mfu']:.1%}/{result['ref_mfu']:.1%} (goal>={result['goal_mfu']:.0%})")
    if result.get("goal") is not None:
        parts.append(f"goal>={result['goal']:.1f}")
    if result.get("error"):
        parts.append(f"ERROR {result['error']}")
    parts.append(f"ratio={result.get('ratio', float('nan')):.2f}")
    return "  ".join(parts)


def suite_main(
    run: Callable[[Any], list[dict[str, Any]]], description: str, argv: list[str] | None = None
) -> None:
    """The command line of a suite module: ``--quick``, ``--threads`` (pinned), ``--repeats``; prints each
    result's summary line and its JSON (without the per-round times)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args(argv)
    pin_threads(args.threads)
    for r in run(args):
        print(summary_line(r), flush=True)
        print(json.dumps({k: v for k, v in r.items() if not k.endswith("_times")}), flush=True)
