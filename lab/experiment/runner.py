"""Running a matrix: selecting and ordering the pending cells, running them with progress and ETA, writing
each result file.
"""

from __future__ import annotations

import fnmatch
import math
import os
import time
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic_write_json
from bertkit.kernels.peak import per_core_gflops
from bertkit.tuning import cached_choices
from lab.experiment.grid import skip_reason, stale_seed_cells
from lab.experiment.locks import claim_cell, held_elsewhere, wait_for_other_runners
from lab.experiment.matrix import Cell, Matrix, load_matrix, logger
from lab.experiment.paths import output_digest
from lab.experiment.rebuilds import (
    describe,
    forget_rebuild,
    other_build_cells,
    rebuilt_inputs,
    record_rebuild,
)
from lab.experiment.results import cell_settings, changed_cells, machine_info, read_results, results_dir
from lab.experiment.work import data_costs


def _matching(cells: list[Cell], pattern: str) -> list[Cell]:
    """The cells whose names match ``pattern``: comma-separated globs; a plain word matches as a substring."""
    pats = [p.strip() for p in pattern.split(",") if p.strip()]

    def match(n: str) -> bool:
        return any(fnmatch.fnmatch(n, p) if any(ch in p for ch in "*?[") else p in n for p in pats)

    return [c for c in cells if match(c.name)]


def select(matrix: Matrix, only: str | None) -> list[Cell]:
    """Cells matching ``only`` (see :func:`_matching`) plus every cell they need, in matrix order."""
    if not only:
        return list(matrix.cells)
    chosen = {c.name for c in _matching(matrix.cells, only)}
    if not chosen:
        raise UserError(f"--only {only!r} matches no cell; cells look like {matrix.cells[-1].name!r}")
    stack = list(chosen)
    while stack:
        c = matrix.cell(stack.pop())
        for n in [*c.needs, *c.after]:
            if n not in chosen:
                chosen.add(n)
                stack.append(n)
    return [c for c in matrix.cells if c.name in chosen]


def plan(matrix: Matrix, cells: list[Cell], done: dict[str, dict], out: Path) -> list[Cell]:
    """The cells to run: those without a result, plus finished ones whose output a pending cell reads but
    which is missing under ``out`` (rebuilt)."""
    from lab.experiment.paths import artifact

    todo = {c.name for c in cells if c.name not in done}
    stack = list(todo)
    while stack:
        for n in matrix.cell(stack.pop()).needs:
            dep = matrix.cell(n)
            a = artifact(dep, out)
            if n in done and n not in todo and a is not None and not a.exists():
                todo.add(n)
                stack.append(n)
    return [c for c in cells if c.name in todo]


def _replace(matrix: Matrix, names: list[str], res_dir: Path, done: dict[str, dict]) -> None:
    """Move the result files of the finished cells ``names`` to ``RESULTS/replaced/`` (kept, not deleted) and
    forget them, so the cells run again."""
    if names:
        (res_dir / "replaced").mkdir(exist_ok=True)
    for name in names:
        result_name = matrix.cell(name).result_name
        try:
            os.replace(res_dir / result_name, res_dir / "replaced" / result_name)
        except FileNotFoundError:  # another runner on this matrix moved it first
            pass
        done.pop(name, None)


def _on_one_build(
    matrix: Matrix, queue: list[Cell], done: dict[str, dict], out: Path, res_dir: Path, summary: dict
) -> list[Cell]:
    """``queue`` plus the finished cells that read another build of a model than the queued cells of their
    grid will (:func:`~lab.experiment.rebuilds.other_build_cells`), their results moved aside, in matrix
    order (a grid cell before the seeds that take its pick)."""
    stale = other_build_cells(matrix, queue, done, out)
    if not stale:
        return queue
    _replace(matrix, stale, res_dir, done)
    summary["one_build"] = [*summary.get("one_build", []), *stale]
    print(f"[experiment {matrix.name}] {len(stale)} finished cell(s) read another build of a rebuilt model "
          f"than the rest of their grid will: they run again ({', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''})",
          flush=True)  # fmt: skip
    order = {c.name: i for i, c in enumerate(matrix.cells)}
    return sorted([*queue, *(matrix.cell(n) for n in stale)], key=lambda c: order[c.name])


def _set_aside(matrix: Matrix, names: list[str], res_dir: Path, done: dict[str, dict], dry_run: bool) -> None:
    """Forget the finished cells ``names`` so they run again; a real sitting also moves their result files to
    ``RESULTS/replaced/`` (:func:`_replace`), a dry run leaves the files where they are."""
    if dry_run:
        for name in names:
            done.pop(name, None)
    else:
        _replace(matrix, names, res_dir, done)


def _fmt_s(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    h, m = divmod(int(s) // 60, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{int(s) % 60:02d}s"


def _still_needed(name: str, later: list[Cell], rebuilds: set[str], res_dir: Path) -> bool:
    """Whether a cell planned as a rebuild is still read by a later cell of this sitting: one with no result
    file yet, or a rebuild that is itself still needed (other runners may have finished the rest)."""
    for i, c in enumerate(later):
        if name in c.needs:
            if c.name in rebuilds:
                if _still_needed(c.name, later[i + 1 :], rebuilds, res_dir):
                    return True
            elif not (res_dir / c.result_name).is_file():
                return True
    return False


def _ready(queue: list[Cell], elsewhere: dict[str, Cell]) -> Cell | None:
    """The first cell of ``queue`` whose inputs are over: none of its ``needs`` or ``after`` is still queued
    here or held by another runner (a failed input is over: the caller skips the cell). A cell whose input
    waits behind another runner's cell is not ready either, even when that input itself is not held yet:
    running it would read inputs that do not exist."""
    pending = {c.name for c in queue} | set(elsewhere)
    return next((c for c in queue if not any(n in pending for n in [*c.needs, *c.after])), None)


def _cpu_now() -> float:
    """CPU seconds of this process and its finished children (the transformers runner is a subprocess)."""
    import resource

    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def _work_kind(kind: str, spec: dict[str, Any]) -> str:
    """What a cell's seconds per estimated FLOP are pooled by: its kind, and for fine-tuning its task too (the
    FLOP estimate leaves out what differs most between tasks: SQuAD's strided features and span decoding, the
    full dev sets' evaluation; a full SQuAD cell takes some 70 times the seconds per FLOP of an SST-2 one).
    ``spec``: a cell's spec (its task a dict) or a result (its task a name)."""
    task = spec.get("task") if kind in ("finetune", "features") else None
    return f"{kind}/{task['name'] if isinstance(task, dict) else task}" if task else kind


Timing = tuple[str, float, float]  # (work kind, wall seconds, estimated FLOPs) of one finished cell


def _seconds_per_flop(rows: list[Timing], work: str) -> float | None:
    """Seconds per estimated FLOP that ``rows`` took for ``work`` (a :func:`_work_kind`), else for its kind,
    else for anything; None without rows."""

    def rate(kept: list[Timing]) -> float | None:
        return sum(w for _, w, _ in kept) / sum(c for _, _, c in kept) if kept else None

    kind = work.split("/")[0]
    same_kind = [t for t in rows if t[0].split("/")[0] == kind]
    return rate([t for t in rows if t[0] == work]) or rate(same_kind) or rate(rows)


def _seconds_left(
    cells: list[Cell],
    timed: list[Timing],
    done: dict[str, dict],
    here: list[Timing] | None = None,
    first_guess: float = 3e10,
) -> float:
    """Estimated seconds for ``cells``: their FLOP estimates times seconds per FLOP, each weighted by the chance
    it runs at all (:func:`_share_run`). ``timed``: earlier sittings' finished cells; ``here``: this sitting's.

    Work this sitting has timed takes this sitting's rate. Other work takes the earlier sittings' rate
    (:func:`_seconds_per_flop`) scaled by how much slower or faster this sitting ran what it did finish:
    hosts of the same CPU model name have run the same step at very different speeds, and a second runner on
    the same cores slows both. ``first_guess`` FLOP/s before anything has finished."""
    here = here or []
    before = [(t, r) for t in here if (r := _seconds_per_flop(timed, t[0]))]
    speed = sum(t[1] for t, _ in before) / sum(t[2] * r for t, r in before) if before else 1.0

    def seconds_per_flop(c: Cell) -> float:
        work = _work_kind(c.kind, c.spec)
        if mine := _seconds_per_flop([t for t in here if t[0] == work], work):
            return mine
        if earlier := _seconds_per_flop(timed, work):
            return earlier * speed
        return _seconds_per_flop(here, work) or 1 / first_guess

    return sum(c.cost * _share_run(c, done) * seconds_per_flop(c) for c in cells)


def _share_run(cell: Cell, done: dict[str, dict]) -> float:
    """1 for a cell that will run; for a rate beyond a grid's edge, which runs only while the pick lies on
    that edge: 1 or 0 once the rates it depends on have finished, one half before."""
    if "extends" not in cell.spec:
        return 1.0
    if not all(n in done for n in cell.spec["decided_by"]):
        return 0.5
    return 0.0 if skip_reason(cell, done) else 1.0


def run_matrix(
    config: str | os.PathLike,
    out: str | os.PathLike | None = None,
    only: str | None = None,
    results: str | os.PathLike | None = None,
    dry_run: bool = False,
    progress: bool = True,
    rerun_changed: bool = False,
    threads: int | None = None,
    rerun: str | None = None,
) -> dict[str, Any]:
    """Run every pending cell of the matrix (see the module docstring); returns a summary dict.
    ``rerun_changed``: run again the finished cells whose settings (or an input's) changed in the config since
    (their old result files move to ``RESULTS/replaced/``); without it such cells stop the run with an error.
    ``threads``: torch threads for this sitting instead of the config's ``threads`` (each result records its
    own). ``rerun``: a pattern as ``only``'s; the finished cells it matches, among those selected, run again
    (their old result files move to ``RESULTS/replaced/``), e.g. to put a grid on one rebuilt model."""
    import torch

    from lab.experiment.cells import run_cell

    if threads is not None and threads < 1:
        raise UserError(f"--threads {threads}: give 1 or more")
    matrix = load_matrix(config)
    out = Path(out) if out else Path("runs") / matrix.name
    res_dir = results_dir(matrix, results)
    done = read_results(res_dir) if res_dir.is_dir() else {}
    cells = select(matrix, only)
    settings = cell_settings(matrix)
    changed = changed_cells(cells, done, settings)
    if changed and not dry_run:
        if not rerun_changed:
            raise UserError(
                f"{matrix.path}: {len(changed)} finished cell(s) ran with other settings than the config now "
                f"gives (theirs or an input's): {', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}; "
                "restore the settings, or pass --rerun-changed to run them again (their result files move to "
                f"{res_dir / 'replaced'})"
            )
        _replace(matrix, changed, res_dir, done)
    again = [c.name for c in _matching(cells, rerun) if c.name in done] if rerun else []
    if rerun and not again:
        raise UserError(f"--rerun {rerun!r} matches no finished cell among those selected")
    _set_aside(matrix, again, res_dir, done, dry_run)
    moved = stale_seed_cells(cells, done)  # an extension of the grid won after these ran
    if moved and not dry_run:
        _replace(matrix, moved, res_dir, done)
    pending = [c for c in cells if c.name not in done]
    one_build = other_build_cells(matrix, pending, done, out)  # a grid must not mix builds of its model
    _set_aside(matrix, one_build, res_dir, done, dry_run)
    todo = plan(matrix, cells, done, out)
    summary: dict[str, Any] = {"matrix": matrix.name, "cells": len(cells), "finished_before": len(
        [c for c in cells if c.name in done]), "to_run": [c.name for c in todo], "out": str(out),
        "results": str(res_dir), "changed": changed, "pick_moved": moved, "rerun": again,
        "rebuild": [c.name for c in todo if c.name in done], "one_build": one_build}  # fmt: skip
    if dry_run:
        return summary
    threads = threads or int(matrix.raw.get("threads", 0))
    if threads:
        torch.set_num_threads(threads)
    info = machine_info()
    # CPU seconds from two hosts of the same CPU model name can differ a lot: each result says how fast a core
    # of its host was, measured once per sitting (beside whatever else runs on the machine then)
    info["gemm_gflops_per_core"] = round(per_core_gflops(), 1)
    out.mkdir(parents=True, exist_ok=True)
    res_dir.mkdir(parents=True, exist_ok=True)
    # a fine-tuning or feature cell's work counted from its task's data where it can be read here: the plan's
    # estimate reads no data and is off by an order of magnitude either way (lab.experiment.work)
    costs = data_costs(matrix)
    for c in matrix.cells:
        c.cost = costs.get(c.name, c.cost)
    # seconds per estimated FLOP: earlier sittings' finished cells, then this sitting's (``here``)
    timed = [(_work_kind(r["kind"], r), r["wall_s"], costs.get(r.get("cell", ""), r["cost"])) for r in done.values()
             if r.get("cost") and r.get("wall_s") and not r.get("skipped")]  # fmt: skip
    # before any cell is timed: half the GEMM speed measured on a core, per thread
    first_guess = 0.5e9 * info["gemm_gflops_per_core"] * torch.get_num_threads()
    here: list[Timing] = []
    ran: list[str] = []
    failed: dict[str, str] = {}
    t_start = time.time()
    # finished before this sitting, planned only because a pending cell reads their output (see plan)
    rebuilds = {c.name for c in todo if c.name in done}
    queue = list(todo)
    elsewhere: dict[str, Cell] = {}  # cells another live runner holds: the cells that need them wait
    k = 0
    while queue:
        cell = _ready(queue, elsewhere)
        if cell is None and not elsewhere:  # cannot happen (needs point back in matrix order): never spin
            failed.update({c.name: "its inputs never ran" for c in queue})
            break
        if cell is None:  # every cell left needs one that another runner is on: wait for it
            queue[:0] = wait_for_other_runners(elsewhere, out, res_dir, done)  # back here if it gave up
            queue = _on_one_build(matrix, queue, done, out, res_dir, summary)  # it may have rebuilt a model
            continue
        # an input another runner holds is not over, result file or not: a rebuild's result file is there
        # from the start, its output may be there while it is still being written
        if held := [matrix.cell(n) for n in cell.needs if held_elsewhere(out, matrix.cell(n))]:
            elsewhere.update({c.name: c for c in held})
            continue
        queue.remove(cell)
        k += 1
        blocked = [n for n in [*cell.needs, *cell.after] if n in failed]
        if blocked:  # an input failed: this cell cannot run in this sitting
            failed[cell.name] = f"needs {blocked[0]}, which failed"
            continue
        left = _seconds_left([cell, *queue], timed, done, here, first_guess)
        finished = sum(1 for c in matrix.cells if c.name in done)  # not results of cells this config lacks
        print(
            f"[experiment {matrix.name}] cell {k}/{k + len(queue)} {cell.name} | done "
            f"{finished}/{len(matrix.cells)} in matrix | ~{_fmt_s(left)} of work left, ETA "
            f"{time.strftime('%H:%M', time.localtime(time.time() + left))}",
            flush=True,
        )
        # `done` also gains what other runners finish meanwhile: that is no reason to rebuild a cell
        rebuild = cell.name in rebuilds
        if rebuild and not _still_needed(cell.name, queue, rebuilds, res_dir):
            continue  # every cell that needed it rebuilt has been finished by another runner
        lock = claim_cell(out, cell)
        if lock is None:  # another live runner is on this cell: leave it to that one; what needs it waits
            elsewhere[cell.name] = cell
            continue
        try:  # the lock goes last, after the result file: a runner that finds no lock must find the result
            if not rebuild and (res_dir / cell.result_name).is_file():  # another runner finished it meanwhile
                done.update(read_results(res_dir))
                continue
            w0, c0 = time.time(), _cpu_now()
            try:
                result = run_cell(matrix, cell, out, done, info, progress=progress)
            except Exception as e:  # noqa: BLE001 - one broken cell must not stop an unattended matrix
                failed[cell.name] = f"{type(e).__name__}: {e}"
                logger.error("cell %s failed", cell.name, exc_info=not isinstance(e, UserError))
                print(f"[experiment {matrix.name}] {cell.name} FAILED: {failed[cell.name]} (no result written; "
                      "the cells that need it are skipped; re-run to retry)", flush=True)  # fmt: skip
                continue
            result.setdefault("wall_s", round(time.time() - w0, 1))
            result.setdefault("cpu_s", round(_cpu_now() - c0, 1))
            result["cost"] = cell.cost
            if digest := output_digest(cell, out):  # what a later rebuild is compared with, bit for bit
                result["output_sha256"] = digest
            if cell.cost and result["wall_s"] and not result.get("skipped"):  # a skipped cell took no time
                here.append((_work_kind(cell.kind, cell.spec), result["wall_s"], cell.cost))
            if rebuild:  # the result file is kept; say whether the rebuild measured the same
                record = record_rebuild(
                    res_dir, out, cell, done[cell.name], result, info, torch.get_num_threads()
                )
                print(f"[experiment {matrix.name}] {describe(record)}", flush=True)
                queue = _on_one_build(matrix, queue, done, out, res_dir, summary)
                continue
            forget_rebuild(out, cell)
            if from_rebuilds := rebuilt_inputs(matrix, cell, out):
                result["rebuilt_inputs"] = from_rebuilds
            # the per-machine kernel choices in effect (bertkit.tuning): another choice rounds differently
            choices = {k: v.get("choice") for k, v in cached_choices().items()}
            result = {"matrix": matrix.name, "cell": cell.name, "kind": cell.kind, **result, **info,
                      "settings": settings[cell.name], "kernel_choices": choices,
                      "threads": torch.get_num_threads(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
            atomic_write_json(res_dir / cell.result_name, result)
        finally:
            lock.unlink(missing_ok=True)
        done[cell.name] = result
        ran.append(cell.name)
        outcome = (
            f"skipped: {result['skipped']}" if result.get("skipped") else f"primary {result.get('primary')}"
        )
        print(f"[experiment {matrix.name}] {cell.name}: {outcome} "
              f"({result['wall_s']:.0f} s wall, {result['cpu_s']:.0f} s CPU)", flush=True)  # fmt: skip
        if "extends" in cell.spec:  # a rate beyond the grid that won moves the pick of finished seed cells
            queued = {c.name for c in queue}
            moved = [n for n in stale_seed_cells(cells, done) if n not in queued]
            _replace(matrix, moved, res_dir, done)
            queue += [matrix.cell(n) for n in moved]
    summary.update({"ran": ran, "failed": failed, "seconds": round(time.time() - t_start, 1),
                    "left_to_other_runners": sorted(elsewhere),
                    "finished": len([c for c in matrix.cells if c.name in done])})  # fmt: skip
    return summary
