"""``bertkit experiment CONFIG.toml``: a matrix of pre-training and fine-tuning runs, resumable cell by cell.

A matrix (``experiments/*.toml``) names a corpus, models and tasks; it expands into *cells*::

    vocab                                   WordPiece vocabulary of the corpus (bertkit vocab)
    prepare                                 token shards (bertkit prepare)
    tasktext/<model>, prepare/<model>       for a model with ``task_text = [tasks]``: those tasks' training
                                            text (bertkit.task_text) and its shards with the corpus
    pretrain/<model>                        one pre-training run per model (or: random init, an existing
                                            model, transformers' own pipeline in a subprocess); with
                                            ``continue_from = "<model>"`` it starts from that model's weights
    finetune/<model>/<task>/lr<x>/seed<s>   the learning-rate grid (only when a task lists several rates)
    finetune/<model>/<task>/seed<s>         every model on every task, each seed (best grid rate on dev)
    features/<name>/<variant>/seed<s>       the feature-based approach (paper Table 7)

Each finished cell writes one small JSON file ``RESULTS/<cell with / -> __>.json`` (scores, seed, tokens seen,
wall and CPU time, commit, torch, CPU model; see DESIGN.md "Wave 2 additions"), by default into
``results/<matrix name>/`` beside the config file, which is committed. A cell whose result file exists is
skipped, unless the config has changed what it computes since: each result records a fingerprint of the
cell's settings and its inputs' (``settings``; paths relative to the data root, so machines and checkouts
agree), and a changed cell stops the run with an error until ``--rerun-changed`` runs it and everything
downstream again (old result files move to ``RESULTS/replaced/``). A killed pre-training cell resumes from
its newest checkpoint (the Trainer resumes bitwise on CPU); a killed fine-tuning cell (minutes) starts again. Run outputs (models, logs) go to ``--out`` (default
``runs/<name>``). When a pending cell needs the model of a finished cell that is absent from ``--out`` (a
fresh machine), that cell is run again to rebuild it; its committed result file is kept.

Paths in the config resolve against the config file's directory; ``data_root`` (default
``../../shared/data`` from ``experiments/``) is where the corpus and task files are looked up.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic_write_json

logger = logging.getLogger("bertkit")

TASK_KINDS = ("glue", "ner", "squad")
# The paper's Table 5 rows (report.table5_models)
TABLE5_ROLES = ("mlm+nsp", "mlm", "ltr", "ltr+bilstm", "random")


@dataclass
class Cell:
    """One unit of work. ``needs``: cells whose outputs it reads; ``cost``: estimated FLOPs (for the ETA)."""

    name: str
    kind: str  # vocab | prepare | pretrain | finetune | features
    spec: dict[str, Any]
    needs: list[str] = field(default_factory=list)
    cost: float = 0.0

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


# ------------------------------------------------------------------------------------------------ config


def _resolve(base: Path, p: str) -> str:
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


def _shape(spec: dict):
    """The BertConfig a model spec trains: its preset with its ``model = {...}`` overrides."""
    from bertkit.config import BertConfig

    return BertConfig.preset(spec.get("preset", "mini"), **(spec.get("model") or {}))


def _pretrain_cost(spec: dict, vocab_size: int) -> float:
    """Training FLOPs of a pre-training cell (for the ETA): 6 x the parameters each token passes through, the
    encoder layers for every token and the output layer (transform + vocabulary decoder) for the predicted ones:
    the masked share under MLM, every token under LTR (which makes LTR ~3x dearer than MLM at BERT-tiny)."""
    from bertkit.pretrain import PretrainConfig

    c = _shape(spec)
    recipe = PretrainConfig(preset=spec.get("preset", "mini"), recipe=spec.get("recipe", "auto"),
                            masked_lm_prob=spec.get("masked_lm_prob")).with_recipe()  # fmt: skip
    predicted = 1.0 if spec.get("objective") == "ltr" else recipe.masked_lm_prob
    head = c.hidden_size * (c.hidden_size + vocab_size)
    return 6.0 * (_nonembedding_params(c) + predicted * head) * int(spec.get("tokens", 0))


MODEL_KEYS = {"name", "objective", "preset", "random", "from", "head", "runner", "script", "same_cpu_as",
              "pretrained", "package", "tokens", "model", "task_text", "continue_from"}  # fmt: skip
TASK_KEYS = {"name", "kind", "task", "train", "dev", "test", "file", "dev_articles", "train_articles",
             "max_train_examples", "epochs", "batch_size", "lr", "max_seq_length", "doc_stride",
             "warmup_ratio", "eval_batch_size", "models", "max_eval_examples",
             "max_query_length", "seeds", "version", "freeze_encoder", "dir", "metric", "protocol"}  # fmt: skip
TOP_KEYS = {"name", "description", "corpus", "vocab_size", "max_seq_length", "threads", "data_root", "seeds",
            "pretrain", "model", "task", "features", "finetune_models", "report", "report_kind", "report_size", "recipe_results",
            "notes", "table5", "table5_protocol", "table6", "diagnostics"}  # fmt: skip


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
    if any(base.get(k) for k in (*NOT_PRETRAINED_HERE, "continue_from")):
        raise UserError(f"{where}: continue_from = {base['name']!r} must be a model bertkit pre-trains here "
                        "from scratch")  # fmt: skip
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
    name = raw.get("name") or path.stem
    base = path.parent
    models = raw.get("model") or []
    if not isinstance(models, list) or not models:
        raise UserError(f"{path}: needs at least one [[model]] table")
    cells: list[Cell] = []
    corpus: list[str] = []
    uses_corpus = any(not (m.get("pretrained") or m.get("package")) for m in models)
    if uses_corpus:
        root = Path(_resolve(base, raw.get("data_root", "../../shared/data")))
        corpus = [_resolve(root, c) for c in raw.get("corpus", [])]
        if not corpus:
            raise UserError(f"{path}: `corpus = [...]` is required to pre-train")
        cells.append(
            Cell("vocab", "vocab", {"corpus": corpus, "vocab_size": int(raw.get("vocab_size", 8192))})
        )
        cells.append(
            Cell("prepare", "prepare", {"corpus": corpus, "max_seq_length": int(raw.get("max_seq_length", 128))},
                 needs=["vocab"])
        )  # fmt: skip
    defaults = dict(raw.get("pretrain", {}))
    names = set()
    for i, m in enumerate(models):
        where = f"{path}: [[model]] #{i + 1}"
        _check_keys(where, m, MODEL_KEYS | set(_pretrain_fields()))
        if "name" not in m:
            raise UserError(f"{where}: `name` is required")
        if m["name"] in names:
            raise UserError(f"{where}: duplicate model name {m['name']!r}")
        names.add(m["name"])
        _check_pretraining_only(f"{path}: model {m['name']!r}", m)
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
        for mname in task_models(raw, t):
            if mname not in by_name:
                raise UserError(f"{path}: task {t['name']}: unknown model {mname!r}")
            root = by_name[mname].get("from", mname)
            mcost = _finetune_cost(t, {**defaults, **by_name[root]})
            grid = []
            if len(lrs) > 1:
                for lr in lrs:
                    g = f"finetune/{mname}/{t['name']}/lr{lr:g}/seed{task_seeds[0]}"
                    cells.append(Cell(g, "finetune", {"model": mname, "task": t, "lr": lr, "seed": task_seeds[0]},
                                      [f"pretrain/{root}"], mcost))  # fmt: skip
                    grid.append(g)
            for s in task_seeds:
                spec = {"model": mname, "task": t, "seed": s, "grid": grid}
                if not grid:
                    spec["lr"] = lrs[0]
                cost = 0.0 if grid and s == task_seeds[0] else mcost
                cells.append(Cell(f"finetune/{mname}/{t['name']}/seed{s}", "finetune", spec,
                                  [f"pretrain/{root}", *grid], cost))  # fmt: skip
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


def _pretrain_fields() -> list[str]:
    import dataclasses

    from bertkit.pretrain import PretrainConfig

    return [f.name for f in dataclasses.fields(PretrainConfig)]


def _finetune_cost(task: dict, model: dict) -> float:
    n = int(task.get("max_train_examples") or 5000)
    seq = int(task.get("max_seq_length", 128))
    return 6.0 * _nonembedding_params(_shape(model)) * n * float(task.get("epochs", 3)) * seq / 2


# ------------------------------------------------------------------------------------------------ results


def machine_info() -> dict[str, Any]:
    """commit (of the bertkit code that runs), torch version, CPU model name, cores."""
    import torch

    here = Path(__file__).resolve().parent
    commit, dirty = "unknown", None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()  # fmt: skip
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=here,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
        dirty = bool(st.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    return {"commit": commit, "dirty": dirty, "torch": torch.__version__.split("+")[0], "cpu": cpu_model(),
            "cores": os.cpu_count(), "python": platform.python_version()}  # fmt: skip


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def results_dir(matrix: Matrix, override: str | None = None) -> Path:
    return Path(override) if override else matrix.base / "results" / matrix.name


# keys of a [[task]] that say which models and seeds the matrix runs it for, not how one cell runs
TASK_KEYS_NOT_IN_A_CELL = ("models", "seeds")


def _portable(value: Any, roots: list[Path], in_task: bool = False) -> Any:
    """``value`` with absolute paths under ``roots`` made relative to them and a task's matrix-wide keys left
    out: what a cell computes, the same on every machine and checkout."""
    if isinstance(value, dict):
        return {k: _portable(v, roots, in_task=k in ("task", "tasks")) for k, v in value.items()
                if not (in_task and k in TASK_KEYS_NOT_IN_A_CELL)}  # fmt: skip
    if isinstance(value, list | tuple):
        return [_portable(v, roots, in_task) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        path = Path(os.path.normpath(value))  # "experiments/../../shared" and "/work/shared" alike
        for root in roots:
            if path.is_relative_to(root):
                return path.relative_to(root).as_posix()
    return value


def cell_settings(matrix: Matrix) -> dict[str, str]:
    """Cell name -> a fingerprint (16 hex digits of sha256) of its settings and of every cell it reads, so a
    change anywhere upstream changes it too. Recorded in each result file (``settings``); a finished cell
    whose fingerprint no longer matches the config was run with other settings."""
    import hashlib

    from bertkit.experiment_cells import data_root

    roots = [Path(os.path.normpath(p)) for p in (data_root(matrix).absolute(), matrix.base.absolute())]
    prints: dict[str, str] = {}
    for cell in matrix.cells:  # in run order: a cell's inputs come before it
        text = json.dumps([_portable(cell.spec, roots), [prints[n] for n in cell.needs]], sort_keys=True,
                          default=str)  # fmt: skip
        prints[cell.name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return prints


def changed_cells(cells: list[Cell], done: dict[str, dict], settings: dict[str, str]) -> list[str]:
    """The finished cells among ``cells`` whose recorded settings differ from ``settings`` (``cell_settings``
    of the config now). Result files from before fingerprints were recorded have none: unchanged."""
    return [c.name for c in cells if done.get(c.name, {}).get("settings") not in (None, settings[c.name])]


def read_results(folder: str | os.PathLike) -> dict[str, dict]:
    """Every result file under ``folder`` by cell name."""
    out = {}
    for p in sorted(Path(folder).glob("*.json")):
        try:
            r = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(
                f"{p}: not a readable result file ({e}); delete it to run that cell again"
            ) from None
        if isinstance(r, dict) and "cell" in r:
            out[r["cell"]] = r
    return out


# ------------------------------------------------------------------------------------------------ running


def select(matrix: Matrix, only: str | None) -> list[Cell]:
    """Cells matching ``only`` (a glob over cell names; a plain word matches as a substring) plus every
    cell they need, in matrix order."""
    if not only:
        return list(matrix.cells)
    pats = [p.strip() for p in only.split(",") if p.strip()]

    def match(n: str) -> bool:
        return any(fnmatch.fnmatch(n, p) if any(ch in p for ch in "*?[") else p in n for p in pats)

    chosen = {c.name for c in matrix.cells if match(c.name)}
    if not chosen:
        raise UserError(f"--only {only!r} matches no cell; cells look like {matrix.cells[-1].name!r}")
    stack = list(chosen)
    while stack:
        for n in matrix.cell(stack.pop()).needs:
            if n not in chosen:
                chosen.add(n)
                stack.append(n)
    return [c for c in matrix.cells if c.name in chosen]


def plan(matrix: Matrix, cells: list[Cell], done: dict[str, dict], out: Path) -> list[Cell]:
    """The cells to run: those without a result, plus finished ones whose output a pending cell reads but
    which is missing under ``out`` (rebuilt)."""
    from bertkit.experiment_cells import artifact

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


def _fmt_s(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    h, m = divmod(int(s) // 60, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{int(s) % 60:02d}s"


POLL_OTHER_RUNNERS_S = 5.0  # how often a runner waiting on another runner's cell looks for its result


def _lock_path(out: Path, cell: Cell) -> Path:
    return out / "locks" / cell.result_name.replace(".json", ".lock")


def _holder(path: Path) -> int | None:
    """The id of the live process that holds the lock file ``path``, else None (no file, or a dead one's)."""
    try:
        pid = int(path.read_text() or 0)
        if (
            pid <= 0
        ):  # empty (its writer died between creating and writing it): kill(0) would signal our group
            return None
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, FileNotFoundError):
        return None
    except PermissionError:  # alive, another user's
        return pid
    return pid


def _lock(out: Path, cell: Cell) -> Path | None:
    """``OUT/locks/<cell>.lock`` holding this process id, or None when a live process holds it (two runners
    on one matrix share the work instead of doing a cell twice). A lock of a dead process is taken over."""
    path = _lock_path(out, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _holder(path) is not None:
                return None
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return path
    return None


def _held_elsewhere(out: Path, cell: Cell) -> bool:
    """Whether a live process other than this one holds ``cell``'s lock."""
    return _holder(_lock_path(out, cell)) not in (None, os.getpid())


def _wait_for_other_runners(
    elsewhere: dict[str, Cell], out: Path, res_dir: Path, done: dict[str, Any]
) -> list[Cell]:
    """Block until a cell another runner holds is over: its result file appeared (read into ``done``) or its
    lock was let go without one (that runner failed or was killed). Returns the latter, for this runner to
    try; both leave ``elsewhere``."""
    while True:
        over = [
            c
            for c in elsewhere.values()
            if (res_dir / c.result_name).is_file() or not _held_elsewhere(out, c)
        ]
        if over:
            done.update(read_results(res_dir))
            for c in over:
                del elsewhere[c.name]
            return [c for c in over if c.name not in done]
        time.sleep(POLL_OTHER_RUNNERS_S)


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


def _cpu_now() -> float:
    """CPU seconds of this process and its finished children (the transformers runner is a subprocess)."""
    import resource

    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def _seconds_left(cells: list[Cell], timed: list[tuple[str, float, float]]) -> float:
    """Estimated seconds for ``cells``: their FLOP estimates times the seconds per FLOP that finished cells of
    the same kind took (any kind's when none has finished; 30 GFLOP/s before anything has)."""

    def rate(rows: list) -> float | None:
        return sum(w for _, w, _ in rows) / sum(c for _, _, c in rows) if rows else None

    overall = rate(timed) or 1 / 3e10
    by_kind = {k: rate([t for t in timed if t[0] == k]) for k in {t[0] for t in timed}}
    return sum(c.cost * (by_kind.get(c.kind) or overall) for c in cells)


def run_matrix(
    config: str | os.PathLike,
    out: str | os.PathLike | None = None,
    only: str | None = None,
    results: str | os.PathLike | None = None,
    dry_run: bool = False,
    progress: bool = True,
    rerun_changed: bool = False,
) -> dict[str, Any]:
    """Run every pending cell of the matrix (see the module docstring); returns a summary dict.
    ``rerun_changed``: run again the finished cells whose settings (or an input's) changed in the config since
    (their old result files move to ``RESULTS/replaced/``); without it such cells stop the run with an error."""
    import torch

    from bertkit.experiment_cells import run_cell

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
        (res_dir / "replaced").mkdir(exist_ok=True)
        for name in changed:
            result_name = matrix.cell(name).result_name
            os.replace(res_dir / result_name, res_dir / "replaced" / result_name)
            del done[name]
    todo = plan(matrix, cells, done, out)
    summary: dict[str, Any] = {"matrix": matrix.name, "cells": len(cells), "finished_before": len(
        [c for c in cells if c.name in done]), "to_run": [c.name for c in todo], "out": str(out),
        "results": str(res_dir), "changed": changed}  # fmt: skip
    if dry_run:
        return summary
    threads = int(matrix.raw.get("threads", 0))
    if threads:
        torch.set_num_threads(threads)
    info = machine_info()
    out.mkdir(parents=True, exist_ok=True)
    res_dir.mkdir(parents=True, exist_ok=True)
    # seconds per estimated FLOP, from the finished cells' own timings (previous sittings included)
    timed = [(r["kind"], r["wall_s"], r["cost"]) for r in done.values() if r.get("cost") and r.get("wall_s")]
    ran: list[str] = []
    failed: dict[str, str] = {}
    t_start = time.time()
    # finished before this sitting, planned only because a pending cell reads their output (see plan)
    rebuilds = {c.name for c in todo if c.name in done}
    queue = list(todo)
    elsewhere: dict[str, Cell] = {}  # cells another live runner holds: the cells that need them wait
    k = 0
    while queue:
        cell = next((c for c in queue if not any(n in elsewhere for n in c.needs)), None)
        if cell is None:  # every cell left needs one that another runner is on: wait for it
            queue[:0] = _wait_for_other_runners(elsewhere, out, res_dir, done)  # back here if it gave up
            continue
        queue.remove(cell)
        k += 1
        blocked = [n for n in cell.needs if n in failed]
        if blocked:  # an input failed: this cell cannot run in this sitting
            failed[cell.name] = f"needs {blocked[0]}, which failed"
            continue
        left = _seconds_left([cell, *queue], timed)
        print(
            f"[experiment {matrix.name}] cell {k}/{len(todo)} {cell.name} | done "
            f"{len(done)}/{len(matrix.cells)} in matrix | ~{_fmt_s(left)} of work left, ETA "
            f"{time.strftime('%H:%M', time.localtime(time.time() + left))}",
            flush=True,
        )
        # `done` also gains what other runners finish meanwhile: that is no reason to rebuild a cell
        rebuild = cell.name in rebuilds
        if rebuild and not _still_needed(cell.name, queue, rebuilds, res_dir):
            continue  # every cell that needed it rebuilt has been finished by another runner
        lock = _lock(out, cell)
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
            if cell.cost and result["wall_s"]:
                timed.append((cell.kind, result["wall_s"], cell.cost))
            if rebuild:
                logger.info("%s rebuilt (its result file is kept)", cell.name)
                continue
            result = {"matrix": matrix.name, "cell": cell.name, "kind": cell.kind, **result, **info,
                      "settings": settings[cell.name],
                      "threads": torch.get_num_threads(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
            atomic_write_json(res_dir / cell.result_name, result)
        finally:
            lock.unlink(missing_ok=True)
        done[cell.name] = result
        ran.append(cell.name)
        print(f"[experiment {matrix.name}] {cell.name}: primary {result.get('primary')} "
              f"({result['wall_s']:.0f} s wall, {result['cpu_s']:.0f} s CPU)", flush=True)  # fmt: skip
    summary.update({"ran": ran, "failed": failed, "seconds": round(time.time() - t_start, 1),
                    "left_to_other_runners": sorted(elsewhere),
                    "finished": len([c for c in matrix.cells if c.name in done])})  # fmt: skip
    return summary
