"""The learning-rate grid of a task: the rate picked on dev, and the rates beyond the grid's edges.

A grid whose best rate lies on its edge has not bracketed the optimum: the pick could be better one step
further. A task's ``lr_extend = [...]`` lists rates outside its grid; on the first seed the one nearest the
edge runs only while the pick (over everything run so far on that side) lies on that edge, so each
(model, task) tries exactly as many extra rates as its own scores ask for.

Cells: ``finetune/<model>/<task>/lr<x>/seed<first>`` for every rate, grid or extension alike. An extension
cell whose pick lies inside writes a result marked ``skipped`` (with its reason), so a later sitting does not
ask again. The seed cells read the pick over the grid and the extensions that ran; a seed cell that finished
at another rate than the pick now gives (an extension won after it ran) is stale and runs again.
"""

from __future__ import annotations

from lab.experiment.matrix import Cell


def ran(names: list[str], done: dict[str, dict]) -> dict[str, dict]:
    """The cells among ``names`` that finished and ran (an extension not needed is skipped)."""
    return {n: done[n] for n in names if n in done and not done[n].get("skipped")}


def pick(names: list[str], done: dict[str, dict]) -> tuple[float, dict[float, float]]:
    """The rate best on dev among the cells ``names`` that ran (first in ``names`` order on ties), and every
    rate's score."""
    scores: dict[float, float] = {}
    for r in ran(names, done).values():
        scores.setdefault(float(r["hyperparameters"]["lr"]), r["primary"])
    if not scores:
        raise ValueError(f"no finished rate among {names}")
    best = max(scores, key=lambda lr: (scores[lr], -list(scores).index(lr)))
    return best, scores


def rate_cells(cell: Cell) -> list[str]:
    """The cells whose scores pick a seed cell's rate: the grid's, then the extensions'."""
    return [*(cell.spec.get("grid") or []), *cell.after]


def reuses_a_rate_run(cell: Cell) -> bool:
    """A seed cell whose grid ran its own seed (the first): it reuses the run at the picked rate
    (:func:`settle_rate`'s ``from_cell``), so it does no work of its own."""
    grid = cell.spec.get("grid") or []
    return bool(grid) and all(g.endswith(f"/seed{cell.spec['seed']}") for g in grid)


def skip_reason(cell: Cell, done: dict[str, dict]) -> str | None:
    """Why the extension cell ``cell`` need not run (the pick over the rates run so far on its side lies
    inside them), or None when the pick lies on its edge and this rate is the next one out."""
    best, scores = pick(cell.spec["decided_by"], done)
    edge = max(scores) if cell.spec["extends"] == "above" else min(scores)
    if best == edge:
        return None
    rates = " / ".join(f"{lr:g}" for lr in sorted(scores))
    return f"the pick on dev, lr {best:g}, lies inside the rates run ({rates})"


def stale_seed_cells(cells: list[Cell], done: dict[str, dict]) -> list[str]:
    """The finished seed cells that ran at another rate than the pick their grid and extensions give now.
    A seed cell whose extensions have not all finished is not judged yet."""
    stale = []
    for c in cells:
        names = rate_cells(c)
        if not c.after or c.name not in done or not all(n in done for n in names):
            continue
        recorded = done[c.name].get("hyperparameters", {}).get("lr")
        if recorded is not None and float(recorded) != pick(names, done)[0]:
            stale.append(c.name)
    return stale


def settle_rate(cell: Cell, done: dict[str, dict]) -> dict:
    """What a fine-tuning cell does about its learning rate, from the finished cells in ``done``:
    ``{"skipped": reason, "lr": x}`` for an extension not needed; else ``{"lr": x}`` (its own rate, or the
    pick on dev), with ``"grid"`` (every rate's score, for the result file) for a seed cell that picks and
    ``"from_cell"`` when a rate cell already ran this seed at the picked rate (its result is reused)."""
    spec = cell.spec
    if "extends" in spec:
        reason = skip_reason(cell, done)
        if reason:
            return {"skipped": reason, "lr": spec["lr"]}
    if not spec.get("grid"):
        return {"lr": float(spec["lr"])}
    best, scores = pick(rate_cells(cell), done)
    out: dict = {"lr": best, "grid": {str(k): v for k, v in scores.items()}}
    for name, r in ran(rate_cells(cell), done).items():
        if r["seed"] == spec["seed"] and r["hyperparameters"]["lr"] == best:
            out["from_cell"] = name
            break
    return out
