"""Rebuilt cells: a finished cell whose output (a model, a prepared corpus) is missing under the run folder —
a fresh machine, a cleaned disk — runs again when a pending cell reads it. Its result file is kept, so the
rebuild must say whether it produced the same thing. On another thread count or CPU a pre-training run is not
bitwise the same (GEMM reductions split differently), so the results that read a rebuild may rest on a model
that differs, slightly, from the one the earlier results used. This module writes that down:

- ``RESULTS/rebuilt/<result stem>__<time>.json``: the kept result's measurements next to the rebuild's, whether
  they are equal, and the thread count, commit and CPU of each (committed with the results);
- the same record at ``OUT/rebuilt/<result stem>.json``, beside the rebuilt output: it lives as long as that
  output, so every result computed from it later, by any runner, names it under ``rebuilt_inputs``. A cell that
  runs afresh (not as a rebuild) removes its own.

A rate grid picks on dev across its cells and its seeds share that pick, so one model's cells on one task must
read one build: :func:`other_build_cells` names the finished cells a runner runs again for that.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write_json
from lab.experiment.matrix import Cell, Matrix

# what a cell measured; the other keys (paths, timings) are expected to differ between sittings.
# `output_sha256` (lab.experiment.paths.output_digest) is compared only where both results have it:
# results written before it existed lack it.
MEASURED = ("primary", "metrics", "tokens", "steps")
DIGEST = "output_sha256"
PROVENANCE = ("threads", "commit", "cpu", "torch", "finished")
# what a build cost: kept beside the measurements so that a study's CPU-hours count its rebuilds too. A
# pre-training's `train_*` keys span all its sittings; `cpu_s` / `wall_s` only the sitting that finished it.
COSTS = ("train_cpu_s", "train_wall_s", "cpu_s", "wall_s")


def _varies_between_sittings(key: str) -> bool:
    """A timing or an output path: never the same twice, whatever was built."""
    return key in ("seconds", "out") or key.endswith(("_s", "_per_s", "_seconds"))


def _measured(value: Any) -> Any:
    """``value`` without its timings and paths (at any depth), which differ between any two sittings."""
    if isinstance(value, dict):
        return {k: _measured(v) for k, v in value.items() if not _varies_between_sittings(k)}
    return value


def same_result(record: dict) -> bool:
    """Whether a rebuild measured what the kept result did, timings and paths aside (recomputed from the
    record, so records of older rules read the same way)."""
    return all(
        _measured(record["kept"].get(k)) == _measured(record["rebuilt"].get(k)) for k in record["compared"]
    )


def _costs(result: dict) -> dict[str, float]:
    """The :data:`COSTS` ``result`` has (a cell that trains nothing has no ``train_*``)."""
    return {k: result[k] for k in COSTS if result.get(k) is not None}


def record_rebuild(
    res_dir: Path, out: Path, cell: Cell, kept: dict, rebuilt: dict, info: dict, threads: int
) -> dict:
    """Write the comparison of the kept result ``kept`` with the rebuild's ``rebuilt`` (see the module
    docstring) and return it. ``info``: :func:`~lab.experiment.results.machine_info` of this sitting."""
    compared = [k for k in MEASURED if k in kept or k in rebuilt]
    compared += [DIGEST] if kept.get(DIGEST) and rebuilt.get(DIGEST) else []
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {
        "cell": cell.name,
        "compared": compared,
        "kept": {k: kept.get(k) for k in (*compared, *PROVENANCE)} | _costs(kept),
        "rebuilt": {
            **{k: rebuilt.get(k) for k in compared},
            **_costs(rebuilt),
            **info,
            "threads": threads,
            "finished": now,
        },  # fmt: skip
    }
    record["same_result"] = same_result(record)
    stem = Path(cell.result_name).stem
    atomic_write_json(res_dir / "rebuilt" / f"{stem}__{now.replace(':', '')}.json", record)
    atomic_write_json(out / "rebuilt" / f"{stem}.json", record)
    return record


def forget_rebuild(out: Path, cell: Cell) -> None:
    """``cell`` ran afresh: its output is no longer a rebuild."""
    (out / "rebuilt" / f"{Path(cell.result_name).stem}.json").unlink(missing_ok=True)


def differences(record: dict) -> list[str]:
    """What a rebuild measured otherwise than the kept result, as "KEY KEPT -> REBUILT" (the digests by name
    only); empty when :func:`same_result`."""
    kept, new = (
        {k: _measured(r[k]) for k in record["compared"]} for r in (record["kept"], record["rebuilt"])
    )
    return [f"{k} {kept[k]} -> {new[k]}" if k != DIGEST else "another output sha256"
            for k in record["compared"] if kept[k] != new[k]]  # fmt: skip


def build_read(result: dict, rebuilt: str) -> str | None:
    """When the build of cell ``rebuilt`` that ``result`` read finished; None for the first build (the one its
    kept result made)."""
    return result.get("rebuilt_inputs", {}).get(rebuilt, {}).get("finished")


def sameness(record: dict) -> str:
    """How a rebuild that measured the same is told: bitwise where both results have their output's digest,
    else only its measurements (a vocabulary of the same tokens in another order measures the same)."""
    if DIGEST in record["compared"]:
        return "the same result, bitwise the same output"
    return "the same measurements (its output's bits not compared: the kept result has no digest)"


def describe(record: dict) -> str:
    """One line for the log: equal, or which measurements moved and from what to what."""
    if same_result(record):
        return f"{record['cell']} rebuilt: {sameness(record)}"
    moved = differences(record)
    k, r = record["kept"], record["rebuilt"]
    return (f"{record['cell']} rebuilt, NOT the same result ({'; '.join(moved)}); kept: {k['threads']} thread(s) "
            f"on {k['cpu']} at {k['commit']}, rebuilt: {r['threads']} on {r['cpu']} at {r['commit']}")  # fmt: skip


def inputs_of(cells: dict[str, Cell], cell: Cell) -> set[str]:
    """The cells whose outputs ``cell`` reads, directly or through other inputs (``cells``: by name)."""
    seen: set[str] = set()
    stack = list(cell.needs)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(cells[name].needs)
    return seen


def rebuilt_inputs(matrix: Matrix, cell: Cell, out: Path) -> dict[str, dict[str, Any]]:
    """The inputs of ``cell`` (direct or through other inputs) whose output under ``out`` is a rebuild: for
    each, whether the rebuild measured the same as the kept result, and when it finished."""
    found = {}
    for name in sorted(inputs_of({c.name: c for c in matrix.cells}, cell)):
        marker = out / "rebuilt" / f"{Path(matrix.cell(name).result_name).stem}.json"
        if marker.is_file():
            record = json.loads(marker.read_text(encoding="utf-8"))
            found[name] = {"same_result": same_result(record), "finished": record["rebuilt"]["finished"]}
    return found


def group_of(name: str) -> str:
    """A fine-tuning or feature cell's model and task (``finetune/MODEL/TASK``): the cells one pick spans."""
    return "/".join(name.split("/")[:3])


def other_build_cells(matrix: Matrix, pending: list[Cell], done: dict[str, dict], out: Path) -> list[str]:
    """Finished cells that read another build of a rebuilt input than the one under ``out`` (one that did not
    measure the same), in the model-and-task groups of the ``pending`` cells: running them again puts each
    such group on one build. Groups without a pending cell keep their results (they are whole already)."""
    cells = {c.name: c for c in matrix.cells}
    builds: dict[str, dict[str, str]] = {}  # group -> {rebuilt input: the build under `out`}
    for cell in pending:
        if cell.kind in ("finetune", "features"):
            for name, build in rebuilt_inputs(matrix, cell, out).items():
                if not build["same_result"]:
                    builds.setdefault(group_of(cell.name), {})[name] = build["finished"]
    stale = []
    for name, result in done.items():
        wanted = builds.get(group_of(name)) if name in cells else None
        if wanted and any(
            rebuilt in inputs_of(cells, cells[name]) and build_read(result, rebuilt) != build
            for rebuilt, build in wanted.items()
        ):
            stale.append(name)
    return [c.name for c in matrix.cells if c.name in stale]  # matrix order: grid cells before their seeds


def read_rebuilds(res_dir: Path) -> list[dict[str, Any]]:
    """Every rebuild record under ``RESULTS/rebuilt/``, oldest first."""
    folder = Path(res_dir) / "rebuilt"
    return (
        [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
        if folder.is_dir()
        else []
    )
