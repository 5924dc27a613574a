"""The keys of a matrix config that take a list, checked before the matrix is expanded: a string there (``seeds
= "12"``, ``corpus = "corpus-large"``) would otherwise be taken one character at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.errors import UserError


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _text(x: Any) -> bool:
    return isinstance(x, str)


def _table(x: Any) -> bool:
    return isinstance(x, dict)


# key -> (what each item must be, what the key takes, an example)
TOP = {
    "corpus": (_text, "a list of file names", 'corpus = ["corpus.txt"]'),
    "seeds": (_whole, "a list of whole numbers", "seeds = [1, 2, 3]"),
    "finetune_models": (_text, "a list of model names", 'finetune_models = ["mlm-mini"]'),
    "task": (_table, "[[task]] tables", '[[task]] name = "SST-2"'),
    "features": (_table, "[[features]] tables", '[[features]] model = "mlm-mini"'),
}
TASK = {
    "seeds": TOP["seeds"],
    "models": (_text, "a list of model names", 'models = ["mlm-mini"]'),
}
FEATURES = {
    "seeds": TOP["seeds"],
    "variants": (_table, "a list of tables", 'variants = [{ name = "last", layers = [-1] }]'),
}


def _check(where: str, table: dict, keys: dict) -> None:
    for key, (ok, what, example) in keys.items():
        value = table.get(key)
        if value is not None and not (isinstance(value, list) and all(ok(x) for x in value)):
            raise UserError(f"{where}: {key} = {value!r}: must be {what}, e.g. {example}")


def check_lists(path: Path, raw: dict) -> None:
    """Refuse, in one line naming the key, a value that is not a list where ``raw`` (a matrix config) takes
    one, or a list of the wrong items; a task's ``lr`` takes one rate or a list of rates."""
    _check(str(path), raw, TOP)
    for i, t in enumerate(raw.get("task", [])):
        where = f"{path}: [[task]] {t.get('name', f'#{i + 1}')!r}"
        _check(where, t, TASK)
        lr = t.get("lr")
        if lr is not None and not (
            _is_number(lr) or isinstance(lr, list) and lr and all(map(_is_number, lr))
        ):
            raise UserError(
                f"{where}: lr = {lr!r}: must be a rate or a list of rates, e.g. lr = [1e-4, 3e-4]"
            )
    for i, f in enumerate(raw.get("features", [])):
        _check(f"{path}: [[features]] #{i + 1}", f, FEATURES)


def check_summary(spec: Any, tasks: set[str], models: set[str], where: str) -> None:
    """UserError naming ``where`` (the config) unless ``spec`` is a table of known models and tasks."""
    if not isinstance(spec, dict):
        raise UserError(f"{where}: [summary] must be a table with models, tasks and average")
    unknown = set(spec) - {"models", "tasks", "average", "pairs"}
    if unknown:
        raise UserError(
            f"{where}: [summary] has unknown keys {sorted(unknown)} (it takes models, tasks, average, pairs)"
        )
    pairs = spec.get("pairs", [])
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(m in models for m in p) for p in pairs
    ):
        raise UserError(f"{where}: [summary] pairs must be a list of [model, model] of the config's models")
    for key, known in (("models", models), ("tasks", tasks), ("average", tasks)):
        names = spec.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UserError(f"{where}: [summary] {key} must be a list of names")
        missing = [n for n in names if n not in known]
        if missing:
            raise UserError(f"{where}: [summary] {key} names {missing}, which the config does not define")
    if not spec.get("models") or not spec.get("tasks"):
        raise UserError(f"{where}: [summary] needs models and tasks")
