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
4. the result is the median seconds per call of each side, ratio = reference / ours; beside it, each
   side's median share of its CPU time spent in the kernel and minor page faults per call (``getrusage``
   of the process around each timed call: both sides run in turn, so each delta is one side's). A large
   kernel share is mostly first-touch page faults of big fresh allocations (glibc returns blocks above
   its mmap threshold to the OS on free), which depend on the host as much as on the code;
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
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from bertkit.kernels.peak import gemm_peak
from bertkit.tuning import ISA_FLAGS, cpu_info  # the flags reported with every run


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

    cpu = cpu_info()
    return {
        "cpu": cpu["model"],
        "cpu_generation": cpu["family_model_stepping"],
        "isa_flags": [f for f in ISA_FLAGS if f in cpu["flags"]],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": _commit(),
    }


def _commit() -> str | None:
    """The checkout's commit (with "+dirty" when files differ from it), or None outside git."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def suite_settings(defaults: dict[str, Any], args: Any = None) -> argparse.Namespace:
    """A suite's settings: ``defaults`` with every value of ``args`` (a namespace or dict; None = unset) over it."""
    ns = argparse.Namespace(**defaults)
    if args is not None:
        for k, v in (vars(args) if not isinstance(args, dict) else args).items():
            if v is not None:
                setattr(ns, k, v)
    return ns


def bf16_supported() -> bool:
    """Whether this CPU has native bf16 GEMMs (AVX512-BF16 or AMX) that oneDNN uses."""
    flags = set(cpu_info()["flags"])
    return bool(flags & {"avx512_bf16", "amx_bf16"}) and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def paired_rows(bench: Callable[..., dict], ns: argparse.Namespace, name: str):
    """The paired rows of a training-step suite, each yielded as soon as it is measured: ``bench(size, ...)``
    for each of ``ns.sizes`` in fp32, then, on a CPU with native bf16, per size the kinds in ``ns.mixed``:
    "auto" (ours ``--precision auto`` against the reference in fp32) and "bf16" (both sides in bf16).
    Pins ``ns.threads`` first. Returns False (after one skipped row named ``name``) without transformers."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        yield {"name": name, "skipped": "transformers is not installed"}
        return False
    if ns.threads:
        torch.set_num_threads(ns.threads)
    shape = dict(repeats=ns.repeats, warmup=ns.warmup, batch_size=ns.batch_size, seq=ns.seq)
    for size in ns.sizes:
        yield bench(size, **shape)
    if bf16_supported():
        for size in ns.sizes:
            if "auto" in ns.mixed:
                yield bench(size, **shape, precision="auto", ref_precision="fp32")
            if "bf16" in ns.mixed:
                yield bench(size, **shape, precision="bf16")
    return True


def machine_peaks() -> dict[str, Any]:
    """fp32 (and bf16 where the CPU has it) GEMM peaks of this machine at the pinned thread count."""
    peaks = {"fp32": gemm_peak(torch.float32)}
    if bf16_supported():
        peaks["bf16"] = gemm_peak(torch.bfloat16, n=4096)
    return peaks


def add_fraction_of_peak(row: dict[str, Any], peaks: dict[str, Any] | None) -> None:
    """Put a row's achieved model FLOP/s (ours and the reference's, from its ``model_flops_per_call``) and
    their fraction of the machine's GEMM peak into ``row``: each side against the peak of the precision it
    ran in (``precision`` / ``ref_precision``: bf16 against the bf16 peak, anything else fp32)."""
    flops_per_call = row.get("model_flops_per_call")
    if not flops_per_call:
        return
    for side, prec in (
        ("ours", row.get("precision")),
        ("ref", row.get("ref_precision", row.get("precision"))),
    ):
        if not row.get(f"{side}_s"):
            continue  # a row timing ours alone
        achieved = flops_per_call / row[f"{side}_s"]
        row[f"{side}_flops_per_s"] = achieved
        dtype = "bf16" if prec == "bf16" else "fp32"
        peak = (peaks or {}).get(dtype)
        if peak:
            row[f"{side}_peak_dtype"] = dtype
            row[f"{side}_fraction_of_peak"] = achieved / peak["flops_per_s"]


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


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_json(args: list[str], drop_env: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Any:
    """Run ``python ARGS`` from the project root in a fresh process (without the environment variables
    ``drop_env``: names, or prefixes ending in ``*``; with ``env`` set on top) and return the JSON object on the
    last line of its output; a failed child raises with the tail of its stderr. For measurements whose setting
    holds for a whole process (malloc, cold starts, another checkout's code)."""
    import subprocess
    import sys
    from pathlib import Path

    def dropped(k: str) -> bool:
        return any(k == d or (d.endswith("*") and k.startswith(d[:-1])) for d in drop_env)

    child_env = {k: v for k, v in os.environ.items() if not dropped(k)} | (env or {})
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, *args], cwd=root, env=child_env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"python {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_memory(fn: Callable[[], Any]) -> int:
    """Largest growth of the resident set (bytes) during one call of ``fn`` (sampled every ms)."""
    if not os.path.exists("/proc/self/statm"):
        return -1
    _trim()
    base = rss_bytes()
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes())
            time.sleep(0.001)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    peak = max(peak, rss_bytes())
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
    kernel_share: dict[str, list[float]] = {"ours": [], "ref": []}
    faults: dict[str, list[float]] = {"ours": [], "ref": []}
    sides = (("ours", ours), ("ref", ref))
    for r in range(repeats):
        for label, fn in sides if r % 2 == 0 else sides[::-1]:
            before = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[label].append((time.perf_counter() - start) / inner)
            after = resource.getrusage(resource.RUSAGE_SELF)
            sys_s, user_s = after.ru_stime - before.ru_stime, after.ru_utime - before.ru_utime
            kernel_share[label].append(sys_s / (sys_s + user_s) if sys_s + user_s > 0 else 0.0)
            faults[label].append((after.ru_minflt - before.ru_minflt) / inner)
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
        "ours_kernel_share": statistics.median(kernel_share["ours"]),
        "ref_kernel_share": statistics.median(kernel_share["ref"]),
        "ours_minor_faults": statistics.median(faults["ours"]),
        "ref_minor_faults": statistics.median(faults["ref"]),
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
        ref = f"{result['ref_per_s']:>10.1f} {unit}/s" if result.get("ref_per_s") else "n/a"
        parts.append(f"ours {result['ours_per_s']:>10.1f} {unit}/s  ref {ref}")
    if result.get("ours_peak_mb") is not None and result.get("ref_peak_mb") is not None:
        parts.append(f"peak {result['ours_peak_mb']:.0f}/{result['ref_peak_mb']:.0f} MB")
    if result.get("ours_fraction_of_peak") is not None:
        parts.append(
            f"peak {result['ours_fraction_of_peak']:.0%} {result['ours_peak_dtype']}"
            + (
                f"/{result['ref_fraction_of_peak']:.0%} {result['ref_peak_dtype']}"
                if result.get("ref_fraction_of_peak") is not None
                else ""
            )
        )
    if result.get("ours_mfu") is not None:
        parts.append(f"MFU {result['ours_mfu']:.1%}/{result['ref_mfu']:.1%} (goal>={result['goal_mfu']:.0%})")
    if result.get("goal") is not None:
        goal = result["goal"]
        parts.append(f"goal>={goal:.1f}" if isinstance(goal, (int, float)) else f"goal {goal}")
    if result.get("error"):
        parts.append(f"ERROR {result['error']}")
    ratio = result.get("ratio")
    parts.append(f"ratio={ratio:.2f}" if isinstance(ratio, (int, float)) else "ratio=n/a (ours only)")
    return "  ".join(parts)


def suite_main(
    run: Callable[[Any], Iterable[dict[str, Any]]], description: str, argv: list[str] | None = None
) -> None:
    """The command line of a suite module: ``--quick``, ``--threads`` (pinned), ``--repeats``; prints each
    result's summary line and its JSON (without the per-round times), each as soon as ``run`` gives it (pass a
    suite's ``run``: one that yields keeps its finished rows when a time limit stops it)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args(argv)
    pin_threads(args.threads)
    for r in run(args):
        print(summary_line(r), flush=True)
        print(json.dumps({k: v for k, v in r.items() if not k.endswith("_times")}), flush=True)
