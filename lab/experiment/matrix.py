"""A matrix config (``experiments/*.toml``) read, checked and expanded into its cells, with their cost estimates."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from lab.experiment.lists import check_lists, check_summary

logger = logging.getLogger("bertkit")


TASK_KINDS = ("glue", "ner", "squad")


# The paper's Table 5 rows (report.table5_models)
TABLE5_ROLES = ("mlm+nsp", "mlm", "ltr", "ltr+bilstm", "random")


def table5_rows(raw: dict) -> dict[str, str]:
    """Role -> model name of Table 5's rows: the config's ``table5 = {role = "model"}`` where it names one,
    else ``<role>-<report_size>`` (``mlm+nsp-mini``)."""
    size = raw.get("report_size", "mini")
    named = raw.get("table5") or {}
    return {role: named.get(role, f"{role}-{size}") for role in TABLE5_ROLES}


def weights_of(raw: dict, name: str) -> str:
    """The model whose pre-trained weights the model ``name`` fine-tunes: itself, or the model its ``from``
    names (one level: a ``from`` model cannot have a ``from``)."""
    return next(m for m in raw.get("model", []) if m["name"] == name).get("from", name)


@dataclass
class Cell:
    """One unit of work. ``needs``: cells whose outputs it reads; ``cost``: estimated FLOPs (for the ETA)."""

    name: str
    kind: str  # vocab | prepare | pretrain | finetune | features
    spec: dict[str, Any]
    needs: list[str] = field(default_factory=list)
    cost: float = 0.0
    # cells that must finish first but are not part of what this cell computes, so not of its fingerprint: a
    # seed cell's grid extensions, which may move the rate it runs at (``grid.stale_seed_cells`` checks that)
    after: list[str] = field(default_factory=list)

    @property
    def result_name(self) -> str:
        return self.name.replace("/", "__").replace("+", "_") + ".json"


@dataclass
class Matrix:
    name: str
    path: Path
    raw: dict[str, Any]
    cells: list[Cell]

    @property
    def base(self) -> Path:
        return self.path.parent

    def cell(self, name: str) -> Cell:
        for c in self.cells:
            if c.name == name:
                return c
        raise KeyError(name)


def resolve(base: Path, p: str) -> str:
    return str(p if os.path.isabs(p) else (base / p))


def _check_keys(where: str, table: dict, allowed: set[str]) -> None:
    unknown = set(table) - allowed
    if unknown:
        raise UserError(f"{where}: unknown setting(s) {sorted(unknown)}; known: {sorted(allowed)}")


def _nonembedding_params(preset_or_cfg: Any) -> int:
    """Parameters of the encoder layers (what a token's FLOPs scale with)."""
    from bertkit.config import BertConfig

    c = BertConfig.preset(preset_or_cfg) if isinstance(preset_or_cfg, str) else preset_or_cfg
    h, i = c.hidden_size, c.intermediate_size
    return c.num_hidden_layers * (4 * h * h + 2 * h * i)


def spec_shape(spec: dict):
    """The BertConfig a model spec trains: its preset with its ``model = {...}`` overrides."""
    from bertkit.config import BertConfig

    return BertConfig.preset(spec.get("preset", "mini"), **(spec.get("model") or {}))


def _pretrain_cost(spec: dict, vocab_size: int) -> float:
    """Training FLOPs of a pre-training cell (for the ETA): 6 x the parameters each token passes through, the
    encoder layers for every token and the output layer (transform + vocabulary decoder) for the predicted ones:
    the masked share under MLM, every token under LTR (which makes LTR ~3x dearer than MLM at BERT-tiny)."""
    from bertkit.pretrain import PretrainConfig

    c = spec_shape(spec)
    recipe = PretrainConfig(preset=spec.get("preset", "mini"), recipe=spec.get("recipe", "auto"),
                            masked_lm_prob=spec.get("masked_lm_prob")).with_recipe()  # fmt: skip
    predicted = 1.0 if spec.get("objective") == "ltr" else recipe.masked_lm_prob
    head = c.hidden_size * (c.hidden_size + vocab_size)
    return 6.0 * (_nonembedding_params(c) + predicted * head) * int(spec.get("tokens", 0))


MODEL_KEYS = {"name", "objective", "preset", "random", "from", "head", "runner", "script", "same_cpu_as",
              "pretrained", "pretrained_sha256", "package", "tokens", "model", "task_text", "continue_from"}  # fmt: skip


TASK_KEYS = {"name", "kind", "task", "train", "dev", "test", "file", "dev_articles", "train_articles",
             "max_train_examples", "epochs", "batch_size", "lr", "max_seq_length", "doc_stride",
             "warmup_ratio", "eval_batch_size", "models", "max_eval_examples",
             "max_query_length", "seeds", "version", "freeze_encoder", "dir", "metric", "protocol",
             "lr_extend"}  # fmt: skip


TOP_KEYS = {"name", "description", "curve", "corpus", "corpus_format", "vocab_size", "vocab_file", "prepare_workers", "max_seq_length", "threads", "data_root", "seeds",
            "pretrain", "model", "task", "features", "finetune_models", "report", "report_kind", "report_size", "recipe_results",
            "notes", "table5", "table5_protocol", "table6", "diagnostics", "gpu_bench", "table7_paper_rows",
            "budget_cpu_hours", "table5_more_tokens", "table5_wide", "summary"}  # fmt: skip


def task_models(raw: dict, task: dict) -> list[str]:
    """The models a [[task]] fine-tunes: its ``models``, else the matrix's ``finetune_models``, else every
    model (one rule for the plan and the report)."""
    return task.get("models") or raw.get("finetune_models") or [m["name"] for m in raw.get("model", [])]


def seeds_of(raw: dict, entry: dict | None = None) -> list[int]:
    """The seeds of a [[task]] or [[features]] entry (its own ``seeds``, else the matrix's), or the matrix's
    (default 1, 2, 3): one rule for the plan and the report."""
    top = [int(s) for s in raw.get("seeds", [1, 2, 3])]
    return [int(s) for s in entry["seeds"]] if entry and "seeds" in entry else top


def prepare_cell_of(spec: dict) -> str:
    """The prepare cell whose shards a pre-training model reads: the matrix corpus's (``prepare``), or for a
    model with ``task_text`` its own (``prepare/<model>``: the tasks' training text, then the corpus)."""
    return f"prepare/{spec['name']}" if spec.get("task_text") else "prepare"


# keys that only a model bertkit pre-trains from scratch here can take, and the keys that make a model not one
PRETRAINING_ONLY = ("task_text", "continue_from")


NOT_PRETRAINED_HERE = ("from", "pretrained", "package", "random", "runner", "same_cpu_as")


def _check_pretraining_only(where: str, m: dict) -> None:
    for key in PRETRAINING_ONLY:
        clash = next((k for k in NOT_PRETRAINED_HERE if m.get(k)), None)
        if key in m and clash:
            raise UserError(
                f"{where}: {key} applies to a model bertkit pre-trains here, not one with `{clash}`"
            )


def _task_text_cells(where: str, spec: dict, raw: dict, corpus: list[str]) -> list[Cell]:
    """The cells that give a model with ``task_text = ["TASK", ...]`` its own corpus: the named [[task]]s'
    training text (full training splits, labels dropped) written first, then the matrix corpus, tokenized with
    the matrix vocabulary (so the held-out documents, the corpus's last ones, are the same as every model's)."""
    names = spec["task_text"]
    tasks = {t.get("name"): t for t in raw.get("task", [])}
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UserError(f'{where}: task_text must be a list of [[task]] names, e.g. ["SST-2"]')
    for n in names:
        if n not in tasks:
            raise UserError(
                f"{where}: task_text: {n!r} is not a [[task]] of the matrix; tasks: {sorted(tasks)}"
            )
    name = spec["name"]
    text = Cell(f"tasktext/{name}", "tasktext", {"model": name, "tasks": [tasks[n] for n in names]})
    prep = Cell(f"prepare/{name}", "prepare",
                {"corpus": corpus, "max_seq_length": int(raw.get("max_seq_length", 128)), "task_text_of": name},
                needs=["vocab", text.name])  # fmt: skip
    return [text, prep]


def _continue_from(where: str, spec: dict, models: list[dict]) -> str:
    """The pre-training cell a ``continue_from = "<model>"`` model starts from (its weights, a fresh optimiser
    and schedule): a model bertkit pre-trains in this matrix, not itself continued (no chains). The weights fix
    the shape, so ``spec`` takes the base's ``preset`` and ``model = {...}`` (for the ETA and the report's
    same-shape comparisons); a different shape of its own is refused rather than silently ignored."""
    base = next((m for m in models if m["name"] == spec["continue_from"]), None)
    if base is None or base is spec:
        raise UserError(f"{where}: continue_from = {spec['continue_from']!r} must name another [[model]]")
    if any(base.get(k) for k in NOT_PRETRAINED_HERE):
        raise UserError(f"{where}: continue_from = {base['name']!r} must be a model bertkit pre-trains here")
    if models.index(base) > models.index(spec):  # cells run in the matrix's order
        raise UserError(f"{where}: declare [[model]] {base['name']!r} before the model that continues it")
    for key in ("preset", "model"):
        if key in spec and spec[key] != base.get(key):
            raise UserError(f"{where}: {key} = {spec[key]!r}: a model continued from {base['name']!r} has its "
                            f"shape ({key} = {base.get(key)!r}); leave {key} out")  # fmt: skip
        if key in base:
            spec[key] = base[key]
    return f"pretrain/{base['name']}"


def load_matrix(path: str | os.PathLike) -> Matrix:
    """Read a matrix TOML and expand it into cells (in run order: data, pre-training, fine-tuning)."""
    from bertkit.pretrain import load_config_file

    path = Path(path).resolve()
    raw = load_config_file(path)
    raw.pop("model_overrides", None)  # load_config_file maps [model] tables; ours are [[model]] lists
    _check_keys(str(path), raw, TOP_KEYS)
    check_lists(path, raw)
    name = raw.get("name") or path.stem
    base = path.parent
    models = raw.get("model") or []
    if not isinstance(models, list) or not models:
        raise UserError(f"{path}: needs at least one [[model]] table")
    if "summary" in raw:  # checked here, not when the report is written: a typo shows before any cell runs
        tasks = {t.get("name") for t in raw.get("task") or [] if isinstance(t, dict)}
        check_summary(
            raw["summary"], tasks, {m.get("name") for m in models if isinstance(m, dict)}, str(path)
        )
    cells: list[Cell] = []
    corpus: list[str] = []
    uses_corpus = any(not (m.get("pretrained") or m.get("package")) for m in models)
    if uses_corpus:
        root = Path(resolve(base, raw.get("data_root", "../../shared/data")))
        corpus = [resolve(root, c) for c in raw.get("corpus", [])]
        if not corpus:
            raise UserError(f"{path}: `corpus = [...]` is required to pre-train")
        vocab = {"corpus": corpus, "vocab_size": int(raw.get("vocab_size", 8192))}
        if raw.get(
            "vocab_file"
        ):  # a given vocabulary (e.g. the published BERT models'), not one trained here
            vocab = {"vocab_file": resolve(root, raw["vocab_file"])}
        cells.append(Cell("vocab", "vocab", vocab))
        prepare = {"corpus": corpus, "max_seq_length": int(raw.get("max_seq_length", 128))}
        if raw.get("corpus_format"):  # e.g. "paragraphs": one paragraph per line, split into sentences
            prepare["format"] = str(raw["corpus_format"])
        if raw.get("prepare_workers"):
            prepare["workers"] = int(raw["prepare_workers"])
        cells.append(Cell("prepare", "prepare", prepare, needs=["vocab"]))
    defaults = dict(raw.get("pretrain", {}))
    names = set()
    for i, m in enumerate(models):
        where = f"{path}: [[model]] #{i + 1}"
        _check_keys(where, m, MODEL_KEYS | set(pretrain_fields()))
        if "name" not in m:
            raise UserError(f"{where}: `name` is required")
        if m["name"] in names:
            raise UserError(f"{where}: duplicate model name {m['name']!r}")
        names.add(m["name"])
        _check_pretraining_only(f"{path}: model {m['name']!r}", m)
        if "model_config" in m:  # a config.json (a ModernBERT one, say) beside the matrix file
            config_file = Path(resolve(base, str(m["model_config"])))
            if not config_file.is_file():
                raise UserError(f"{where}: model_config {m['model_config']!r}: {config_file} not found")
            m["model_config"] = str(config_file)
    _check_report_models(path, raw, names)
    for m in models:
        if "from" in m:
            if m["from"] not in names or "from" in next(x for x in models if x["name"] == m["from"]):
                raise UserError(
                    f"{path}: model {m['name']!r}: `from = {m['from']!r}` must name a trained model"
                )
            continue
        continued = (
            _continue_from(f"{path}: model {m['name']!r}", m, models) if "continue_from" in m else None
        )
        spec = {**defaults, **m}
        if m.get("pretrained") or m.get("package"):
            cells.append(Cell(f"pretrain/{m['name']}", "pretrained", spec))
            continue
        if "task_text" in m:
            cells.extend(_task_text_cells(f"{path}: model {m['name']!r}", spec, raw, corpus))
        needs = [prepare_cell_of(spec)]
        if continued:
            needs.append(continued)
        if m.get("same_cpu_as"):
            if m["same_cpu_as"] not in names:
                raise UserError(
                    f"{path}: model {m['name']!r}: same_cpu_as {m['same_cpu_as']!r} is not a model"
                )
            needs.append(f"pretrain/{m['same_cpu_as']}")
        cost = 0.0 if m.get("random") else _pretrain_cost(spec, int(raw.get("vocab_size", 8192)))
        cells.append(
            Cell(f"pretrain/{m['name']}", "random" if m.get("random") else "pretrain", spec, needs, cost)
        )

    by_name = {m["name"]: m for m in models}
    for i, t in enumerate(raw.get("task", [])):
        _check_keys(f"{path}: [[task]] #{i + 1}", t, TASK_KEYS)
        if t.get("kind") not in TASK_KINDS:
            raise UserError(f"{path}: [[task]] {t.get('name', i + 1)}: kind must be one of {TASK_KINDS}")
        lrs = t.get("lr", 5e-5)
        lrs = [float(x) for x in (lrs if isinstance(lrs, list) else [lrs])]
        task_seeds = seeds_of(raw, t)
        beyond = _lr_extension(f"{path}: task {t['name']}", t, lrs)
        for mname in task_models(raw, t):
            if mname not in by_name:
                raise UserError(f"{path}: task {t['name']}: unknown model {mname!r}")
            root = weights_of(raw, mname)
            mcost = _finetune_cost(t, {**defaults, **by_name[root]})
            grid = []
            if len(lrs) > 1:
                for lr in lrs:
                    g = f"finetune/{mname}/{t['name']}/lr{lr:g}/seed{task_seeds[0]}"
                    cells.append(Cell(g, "finetune", {"model": mname, "task": t, "lr": lr, "seed": task_seeds[0]},
                                      [f"pretrain/{root}"], mcost))  # fmt: skip
                    grid.append(g)
            extensions = []
            for side, rates in beyond.items():  # each side's rates nearest the edge first (see grid.py)
                closer: list[str] = []
                for lr in rates:
                    g = f"finetune/{mname}/{t['name']}/lr{lr:g}/seed{task_seeds[0]}"
                    spec = {"model": mname, "task": t, "lr": lr, "seed": task_seeds[0], "extends": side,
                            "decided_by": [*grid, *closer]}  # fmt: skip
                    cells.append(Cell(g, "finetune", spec, [f"pretrain/{root}", *grid, *closer], mcost))
                    closer.append(g)
                extensions += closer
            for s in task_seeds:
                spec = {"model": mname, "task": t, "seed": s, "grid": grid}
                if not grid:
                    spec["lr"] = lrs[0]
                cost = 0.0 if grid and s == task_seeds[0] else mcost
                cells.append(Cell(f"finetune/{mname}/{t['name']}/seed{s}", "finetune", spec,
                                  [f"pretrain/{root}", *grid], cost, after=extensions))  # fmt: skip
    feature_names: set[str] = set()
    for i, f in enumerate(raw.get("features", [])):
        _check_keys(f"{path}: [[features]] #{i + 1}", f, {"name", "model", "task", "variants", "epochs", "lr",
                                                          "batch_size", "hidden_size", "max_train_examples",
                                                          "seeds"})  # fmt: skip
        entry = features_name(f)
        if entry in feature_names:  # two entries of one name would write the same result files
            raise UserError(
                f"{path}: [[features]] #{i + 1}: name {entry!r} is taken: give the entry its own `name`"
            )
        feature_names.add(entry)
        tasks = {t["name"]: t for t in raw.get("task", [])}
        if f.get("task") not in tasks or tasks[f["task"]]["kind"] != "ner":
            raise UserError(f"{path}: [[features]] #{i + 1}: `task` must name a [[task]] of kind ner")
        if f.get("model") not in by_name:
            raise UserError(f"{path}: [[features]] #{i + 1}: unknown model {f.get('model')!r}")
        for v in f.get("variants", []):
            for s in seeds_of(raw, f):
                spec = {**f, "variant": v, "seed": s, "task": tasks[f["task"]]}
                cost = _finetune_cost(tasks[f["task"]], {**defaults, **by_name[f["model"]]}) / 3
                cells.append(Cell(f"features/{entry}/{v['name']}/seed{s}", "features", spec,
                                  [f"pretrain/{f['model']}"], cost))  # fmt: skip
    return Matrix(name, path, raw, cells)


def _lr_extension(where: str, task: dict, grid: list[float]) -> dict[str, list[float]]:
    """A task's ``lr_extend``: the rates beyond its grid's edges, by side, nearest the edge first."""
    raw = task.get("lr_extend", [])
    if not raw:
        return {}
    if not isinstance(raw, list) or not all(isinstance(x, int | float) and x > 0 for x in raw):
        raise UserError(f"{where}: lr_extend = {raw!r}: must be a list of positive learning rates")
    if len(grid) < 2:
        raise UserError(f"{where}: lr_extend needs a grid to extend: give `lr` two rates or more")
    rates = [float(x) for x in raw]
    inside = [x for x in rates if min(grid) <= x <= max(grid)]
    if inside or len(set(rates)) < len(rates):
        raise UserError(
            f"{where}: lr_extend = {raw!r}: each rate must lie outside the grid "
            f"({min(grid):g} to {max(grid):g}) and appear once"
        )
    below = sorted((x for x in rates if x < min(grid)), reverse=True)
    above = sorted(x for x in rates if x > max(grid))
    return {side: xs for side, xs in (("below", below), ("above", above)) if xs}


def features_name(entry: dict) -> str:
    """The name of a [[features]] entry in its cells, ``features/<name>/<variant>/seed<s>``: its own ``name``,
    else its model's (one entry per model needs none; a second one for that model, e.g. on another task, does)."""
    return str(entry.get("name", entry.get("model")))


def _check_report_models(path: Path, raw: dict, names: set[str]) -> None:
    """``table5 = {role = "model"}`` and ``table6 = ["model", ...]`` (the paper report's rows) and
    ``diagnostics = ["model", ...]`` (models beyond the issue's matrix, whose CPU time the report counts apart)
    name models of the matrix, and table5's roles are the paper's; ``table5_protocol`` (the fine-tuning protocol
    Table 5 and the first findings show) names a protocol of the tasks."""
    table5, table6 = raw.get("table5", {}), raw.get("table6", [])
    if not isinstance(table5, dict) or not isinstance(table6, list):
        raise UserError(
            f'{path}: `table5` must be a table {{role = "model"}} and `table6` a list of model names'
        )
    for role, model in table5.items():
        if role not in TABLE5_ROLES:
            raise UserError(f"{path}: table5: unknown role {role!r}; roles: {list(TABLE5_ROLES)}")
        if model not in names:
            raise UserError(f"{path}: table5.{role} = {model!r} is not a [[model]] of the matrix")
    for model in table6:
        if model not in names:
            raise UserError(f"{path}: table6: {model!r} is not a [[model]] of the matrix")
    _check_more_tokens(path, raw, names)
    _check_wide(path, raw, names)
    headline = raw.get("table5_protocol")
    named = {t.get("protocol") for t in raw.get("task", [])} - {None}
    if headline is not None and headline not in named:
        raise UserError(f"{path}: table5_protocol = {headline!r} is no task's `protocol`; "
                        f"the tasks' protocols: {sorted(named) or 'none'}")  # fmt: skip
    diagnostics = raw.get("diagnostics", [])
    if not isinstance(diagnostics, list):
        raise UserError(f"{path}: `diagnostics` must be a list of model names")
    for model in diagnostics:
        if model not in names:
            raise UserError(f"{path}: diagnostics: {model!r} is not a [[model]] of the matrix")
    budget = raw.get("budget_cpu_hours")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0
    ):
        raise UserError(f"{path}: budget_cpu_hours = {budget!r}: must be a positive number of CPU-hours")


def _check_more_tokens(path: Path, raw: dict, names: set[str]) -> None:
    """``table5_more_tokens = {role = "model"}``: Table 5 rows pre-trained for longer, each a model whose
    weights continue (``continue_from``) those of the Table 5 row of the same role, so the report can set
    the MLM-vs-LTR gaps at both budgets side by side."""
    more = raw.get("table5_more_tokens", {})
    if not isinstance(more, dict):
        raise UserError(f'{path}: `table5_more_tokens` must be a table {{role = "model"}}')
    by_name = {m["name"]: m for m in raw.get("model", [])}
    table5 = {role: m for role, m in table5_rows(raw).items() if m in by_name}

    for role, model in more.items():
        if role not in TABLE5_ROLES:
            raise UserError(f"{path}: table5_more_tokens: unknown role {role!r}; roles: {list(TABLE5_ROLES)}")
        if model not in names:
            raise UserError(f"{path}: table5_more_tokens.{role} = {model!r} is not a [[model]] of the matrix")
        base = table5.get(role)
        start = by_name[weights_of(raw, model)].get("continue_from")
        if base is None or start != weights_of(raw, base):
            want = (
                f"continue_from = {weights_of(raw, base)!r}" if base else f"a table5.{role} row to continue"
            )
            raise UserError(f"{path}: table5_more_tokens.{role} = {model!r}: its weights must continue Table 5's "
                            f"{role} row ({want})")  # fmt: skip


def _check_wide(path: Path, raw: dict, names: set[str]) -> None:
    """``table5_wide = {role = "model"}``: Table 5's rows again at one other shape (e.g. twice the width), so the
    report can set the MLM-vs-LTR gap at both shapes side by side; every row must have that one shape."""
    wide = raw.get("table5_wide", {})
    if not isinstance(wide, dict):
        raise UserError(f'{path}: `table5_wide` must be a table {{role = "model"}}')
    shapes = {}
    for role, model in wide.items():
        if role not in TABLE5_ROLES:
            raise UserError(f"{path}: table5_wide: unknown role {role!r}; roles: {list(TABLE5_ROLES)}")
        if model not in names:
            raise UserError(f"{path}: table5_wide.{role} = {model!r} is not a [[model]] of the matrix")
        shapes[model] = shape_of(raw, model)
    if len({(c.num_hidden_layers, c.hidden_size) for c in shapes.values()}) > 1:
        listed = ", ".join(f"{m} {c.num_hidden_layers} x {c.hidden_size}" for m, c in shapes.items())
        raise UserError(
            f"{path}: table5_wide: its rows must share one shape (layers x hidden); they are {listed}"
        )


def shape_of(raw: dict, model: str):
    """The BertConfig of the weights ``model`` fine-tunes: the matrix's [pretrain] defaults, then the preset and
    ``model = {...}`` overrides of its pre-trained run (of its ``from``'s; a continued run's start's)."""
    by_name = {m["name"]: m for m in raw.get("model", [])}
    spec = by_name[weights_of(raw, model)]
    while spec.get("continue_from") in by_name:  # a continuation keeps its start's shape
        spec = by_name[spec["continue_from"]]
    return spec_shape({**raw.get("pretrain", {}), **spec})


def pretrain_fields() -> list[str]:
    import dataclasses

    from bertkit.pretrain import PretrainConfig

    return [f.name for f in dataclasses.fields(PretrainConfig)]


def _finetune_cost(task: dict, model: dict) -> float:
    n = int(task.get("max_train_examples") or 5000)
    seq = int(task.get("max_seq_length", 128))
    return 6.0 * _nonembedding_params(spec_shape(model)) * n * float(task.get("epochs", 3)) * seq / 2
