"""Per-machine choice of the CPU-dependent fast paths, measured once and cached.

A fast path that wins on one CPU can lose on another (oneDNN's fp32 GEMM ran 2-4x faster than MKL's on
AMD EPYC and bought nothing on an Intel Xeon). So each such path is chosen at first use by a short
side-by-side measurement on the machine at hand (alternating rounds, medians), the choice is logged
(logger ``bertkit``) and cached in a small JSON file keyed by the CPU (model name and ISA flags), the torch
version and the thread count:

    <cache folder>/kernels.json   (default folder: $XDG_CACHE_HOME/bertkit or ~/.cache/bertkit)

An environment variable overrides each choice without measuring, another names the cache folder and a third
turns the cache off (measure afresh, write nothing): their names and values are in :mod:`bertkit.settings`.

``bertkit tune`` (:func:`tune`) makes the choices that do not depend on a model as an explicit step, and
``--show`` prints what is recorded (:func:`recorded_choices`). A training run records the choices it computed
with (its run config and checkpoints), and a resumed run takes them from there instead of choosing again
(:func:`bertkit.kernels.gemm.resume_backend`, :func:`bertkit.train.precision.resume_precision`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import settings

logger = logging.getLogger("bertkit")

# How idle OpenMP threads wait must be fixed before torch starts its OpenMP pool, so it cannot be timed at
# first use like the kernels below. The entry points that own their process (the `bertkit` command,
# `python -m bertkit.retrieval`, the benchmarks) call apply_process_defaults first thing, which decides it from the machine's load at that
# moment unless the user set OMP_WAIT_POLICY; a library user's environment is theirs (`import bertkit`
# changes nothing):
# - a machine already saturated by other work (1-minute load average >= its CPU count): PASSIVE, idle threads
#   sleep. Spinning threads that lose their core stall every parallel region: with 2 threads on a shared
#   2-core machine both bertkit and transformers ran 2-3x slower and far noisier (lab/notes/notes-perf.md).
# - otherwise OpenMP's default (spin a while, then sleep). On an idle Intel Xeon, PASSIVE made bertkit's
#   MiniLM inference 20% slower in fp32 and 37% in bf16 (every small op's parallel region pays a futex
#   wake-up), while transformers' fp32 moved by under 1% (lab/notes/notes-perf.md, 2026-11-25).
BUSY_LOAD_PER_CPU = 1.0


def omp_wait_policy(load_average: float, cpus: int) -> str | None:
    """The OMP_WAIT_POLICY for a process starting at this 1-minute load average on ``cpus`` CPUs: "PASSIVE"
    on a saturated machine, else None (OpenMP's default)."""
    return "PASSIVE" if load_average >= BUSY_LOAD_PER_CPU * cpus else None


def apply_process_defaults() -> dict[str, str]:
    """Set OMP_WAIT_POLICY by :func:`omp_wait_policy` where the user did not, if torch has not started yet;
    returns what is in effect (logged at debug level). Called by the entry points that own their process
    (``bertkit.cli.main``, ``bertkit/retrieval/__main__.py``, ``benchmarks/__init__.py``) before anything
    imports torch; once torch runs it does nothing, so a trainer or server started from a user's script
    cannot call it usefully."""
    import sys

    if "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform: OpenMP's default
            load = 0.0
        policy = omp_wait_policy(load, os.cpu_count() or 1)
        if policy is not None:
            os.environ["OMP_WAIT_POLICY"] = policy
        logger.debug(
            "OMP_WAIT_POLICY=%s (1-minute load average %.2f on %s CPUs)", policy, load, os.cpu_count()
        )
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)")}


CACHE_FILE = "kernels.json"


def cache_dir() -> Path:
    """Where the choices are cached: the folder :mod:`bertkit.settings` names, else $XDG_CACHE_HOME/bertkit,
    else ~/.cache/bertkit."""
    pinned = settings.cache_dir_override()
    if pinned is not None:
        return pinned
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bertkit"


# the flags that decide which GEMM kernels a CPU can run (recorded with benchmarks and experiment results)
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu_info() -> dict[str, Any]:
    """CPU model name, ISA flags and family/model/stepping (from /proc/cpuinfo; the platform's name
    elsewhere, and "" for what it lacks). Two hosts that share a model name (e.g. "AMD EPYC") can be
    different generations: family/model/stepping tells them apart."""
    import platform

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip() and fields:  # the first CPU's block ends
                    break
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = fields.get("flags", "")
    generation = "/".join(fields.get(k, "") for k in ("cpu family", "model", "stepping"))
    return {"model": model, "flags": flags.split(), "family_model_stepping": generation.strip("/")}


def machine_key() -> str:
    """What a cached choice holds for: CPU model and flags, torch version, thread count."""
    import torch

    info = cpu_info()
    raw = json.dumps([info["model"], sorted(info["flags"]), torch.__version__, torch.get_num_threads()])
    return (
        f"{info['model']}|torch {torch.__version__}|{torch.get_num_threads()} threads|"
        + hashlib.sha256(raw.encode()).hexdigest()[:12]
    )


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def time_alternating(
    options: dict[str, Callable[[], Any]], rounds: int = 5, warmup: int = 1
) -> dict[str, float]:
    """Median seconds per call of each option, the options alternating (in turn first) each round."""
    names = list(options)
    for _ in range(warmup):
        for n in names:
            options[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            options[n]()
            times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(t) for n, t in times.items()}


def choose(
    name: str,
    measure: Callable[[], tuple[str, dict[str, Any]]],
    override: settings.Setting[str] | None = None,
    force: bool = False,
) -> str:
    """The choice ``name`` for this machine: from the environment variable ``override`` (one of
    :mod:`bertkit.settings`) if set, else from the cache (unless ``force``), else ``measure()`` -> (choice,
    details), which is logged and cached."""
    return decide(name, measure, override, force)[0]


def decide(
    name: str,
    measure: Callable[[], tuple[str, dict[str, Any]]],
    override: settings.Setting[str] | None = None,
    force: bool = False,
    current: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[str, str]:
    """:func:`choose`, and where the choice came from: "environment (NAME=VALUE)", "cache" or "measured".
    ``current(entry)``: whether a cached entry still counts (False: one an older measurement wrote, which
    is measured again and replaced)."""
    choice = override.value() if override is not None else None
    if choice is not None:
        logger.info("kernel choice %s=%s (from %s=%s)", name, choice, override.name, override.raw())
        return choice, f"environment ({override.name}={override.raw()})"
    use_cache = settings.choice_cache_enabled()
    path = cache_dir() / CACHE_FILE
    key = machine_key()
    if use_cache and not force:
        cached = _read_cache(path).get(key, {}).get(name)
        usable = isinstance(cached, dict) and isinstance(cached.get("choice"), str)
        if usable and (current is None or current(cached)):
            logger.debug("kernel choice %s=%s (cached in %s)", name, cached["choice"], path)
            return cached["choice"], "cache"
    choice, details = measure()
    logger.info("kernel choice %s=%s (measured on this machine: %s)", name, choice, details)
    if use_cache:
        _store(
            path,
            key,
            name,
            {"choice": choice, "details": details, "date": time.strftime("%Y-%m-%d %H:%M:%S")},
        )
    return choice, "measured"


def _store(path: Path, key: str, name: str, entry: dict[str, Any]) -> None:
    from bertkit.io import atomic_write_json

    data = _read_cache(path)  # re-read: another process may have added its choices meanwhile
    data.setdefault(key, {})[name] = entry
    try:
        atomic_write_json(path, data)
    except OSError as e:  # a read-only home must not stop the model: the choice holds for this process
        logger.warning("could not cache kernel choices in %s: %s", path, e)


def cached_choices() -> dict[str, Any]:
    """This machine's cached choices (name -> entry), for reports and ``bertkit info``."""
    return _read_cache(cache_dir() / CACHE_FILE).get(machine_key(), {})


def recorded_choice(name: str) -> str | None:
    """This machine's cached choice ``name``, without measuring; None when none is recorded or the cache is
    off (:mod:`bertkit.settings`)."""
    if not settings.choice_cache_enabled():
        return None
    entry = cached_choices().get(name)
    return entry["choice"] if isinstance(entry, dict) and isinstance(entry.get("choice"), str) else None


def recorded_choices() -> dict[str, Any]:
    """What ``bertkit tune --show`` prints: the cache file, this machine's key and its recorded choices
    (name -> choice, and name -> the measurement's details and date); nothing is measured."""
    entries = cached_choices() if settings.choice_cache_enabled() else {}
    return {
        "cache": str(cache_dir() / CACHE_FILE),
        "machine": machine_key(),
        "choices": {k: v.get("choice") for k, v in entries.items() if isinstance(v, dict)},
        "details": {k: {"details": v.get("details"), "date": v.get("date")} for k, v in entries.items()
                    if isinstance(v, dict)},
    }  # fmt: skip
