"""Fine-tuning cells: a task fine-tuned on a model (the rate grid's pick on dev), SQuAD by articles, and
Table 7's feature-based cells.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import torch

from bertkit.errors import UserError
from bertkit.io import atomic_write
from lab.experiment.cpu_ledger import CpuLedger
from lab.experiment.grid import settle_rate
from lab.experiment.matrix import Matrix
from lab.experiment.paths import data_root, model_dir_for, model_shape, root_model
from lab.experiment.results import portable

# optimizer steps between a fine-tuning cell's checkpoints: a cell stopped by SIGTERM checkpoints at once, one
# killed outright (a session's end) at the last of these; either resumes there in its next sitting
CHECKPOINT_EVERY = 250


def run_finetune(matrix, cell, out, done, progress) -> dict:
    spec, t = cell.spec, cell.spec["task"]
    rate = settle_rate(cell, done)
    if "skipped" in rate:  # a rate beyond the grid's edge while the pick lies inside
        return {"model": spec["model"], "task": t["name"], "seed": spec["seed"], "skipped": rate["skipped"],
                "primary": None, "hyperparameters": {"lr": rate["lr"]}}  # fmt: skip
    model_dir = model_dir_for(matrix, spec["model"], out, done)
    lr = rate["lr"]
    root = root_model(matrix, spec["model"])
    common = {"model": spec["model"], "task": t["name"], "seed": spec["seed"],
              "tokens": done.get(f"pretrain/{root}", {}).get("tokens")}  # fmt: skip
    if rate.get("grid"):
        common["grid"] = rate["grid"]
    if rate.get("from_cell"):  # a rate cell already ran this seed at this rate: reuse it
        r = done[rate["from_cell"]]
        keep = ("primary", "metrics", "hyperparameters", "examples", "train_examples", "wall_s", "cpu_s",
                "predictions_sha256")  # fmt: skip
        return {**common, **{k: r[k] for k in keep if k in r}, "from_cell": rate["from_cell"]}
    work = out / cell.name
    resume = resume_or_start(work, run_identity(matrix, cell, lr, model_dir))
    torch.manual_seed(spec["seed"])
    kind = t["kind"]
    with CpuLedger(work / "cpu.json") as ledger:
        r, primary = _train(matrix, t, model_dir, work, lr, int(spec["seed"]), progress, resume)
    common["cpu_s"], common["wall_s"] = ledger.totals()  # every sitting's, not only this one's
    if ledger.sittings > 1:
        common["sittings"] = ledger.sittings
    metrics = {k: (round(100 * v, 2) if kind != "squad" and isinstance(v, float) else v)
               for k, v in r["metrics"].items() if not isinstance(v, dict)}  # fmt: skip
    result = {**common, "primary": round(primary, 2), "metrics": metrics, "examples": r.get("examples"),
              "train_examples": r.get("train_examples"), "steps": r.get("steps"),
              "hyperparameters": {"lr": lr, **{k: t[k] for k in ("epochs", "batch_size", "max_seq_length",
                                  "max_train_examples", "warmup_ratio", "doc_stride", "freeze_encoder", "version") if k in t}}}  # fmt: skip
    digest = predictions_digest(work, kind)
    if digest:
        result["predictions_sha256"] = digest
    for extra in ("test",):
        if extra in r:
            result[extra] = {
                k: round(100 * v, 2) for k, v in r[extra]["metrics"].items() if isinstance(v, float)
            }
    shutil.rmtree(work, ignore_errors=True)  # scores kept in the result; the fine-tuned weights are not
    return result


def run_identity(matrix: Matrix, cell, lr: float, model_dir: Path) -> str:
    """What a fine-tuning run computes from: the cell's settings (portable across checkouts), the rate it
    settled on and the weights it starts from (a rebuilt model is another start)."""
    from bertkit.data.shard_build import sha256_file

    weights = {
        p.name: sha256_file(p) for p in sorted([*model_dir.glob("*.safetensors"), *model_dir.glob("*.bin")])
    }
    identity = {"cell": portable(cell.spec, [matrix.base]), "lr": lr, "weights_sha256": weights}
    return json.dumps(identity, sort_keys=True, default=str)


def resume_or_start(work: Path, identity: str) -> bool:
    """Whether the fine-tuning run in ``work`` continues where an earlier sitting stopped: it has a checkpoint
    and the same :func:`run_identity`. Otherwise ``work`` is emptied and marked with ``identity``."""
    marker = work / "run.json"
    if marker.is_file() and marker.read_text(encoding="utf-8") == identity and any(work.rglob("step-*.pt")):
        return True
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with atomic_write(marker, "w") as f:
        f.write(identity)
    return False


def _train(matrix, t: dict, model_dir: Path, work: Path, lr: float, seed: int, progress: bool,
           resume: bool) -> tuple[dict, float]:  # fmt: skip
    """Fine-tune (checkpointing every :data:`CHECKPOINT_EVERY` steps; ``resume``: from the newest checkpoint
    under ``work``); the run's summary and its primary score."""
    if t["kind"] == "squad":
        r = _squad(matrix, t, model_dir, work, lr, seed, progress, resume)
        return r, r["metrics"]["f1"]
    from bertkit.tasks.finetune import finetune
    from bertkit.tasks.spec import Settings

    task = _task_data(matrix, t)
    s = Settings(epochs=float(t.get("epochs", 3)), batch_size=int(t.get("batch_size", 32)), lr=lr,
                 max_seq_length=int(t.get("max_seq_length", 128)), seed=seed,
                 checkpoint_every=CHECKPOINT_EVERY, resume=resume,
                 warmup_ratio=float(t.get("warmup_ratio", 0.1)), max_train_examples=t.get("max_train_examples"),
                 eval_batch_size=int(t.get("eval_batch_size", 128)), progress=progress,
                 freeze_encoder=bool(t.get("freeze_encoder", False)))  # fmt: skip
    r = finetune(task, model_dir, work, s)
    return r, 100 * r["metrics"][task.main_metric]


def predictions_digest(work: Path, kind: str) -> str | None:
    """sha256 of what a fine-tuned model predicted on dev, in dev order (the labels or tags of
    ``predictions.jsonl``, SQuAD's ``predictions.json`` by question id): two runs with the same score may still
    have got different examples right, and only this tells them apart once the run folder is gone. None when
    the run wrote no predictions."""
    if kind == "squad":
        path = work / "predictions.json"
        if not path.is_file():
            return None
        predicted = json.loads(path.read_text(encoding="utf-8"))
    else:
        path = work / "predictions.jsonl"
        if not path.is_file():
            return None
        lines = path.read_text(encoding="utf-8").splitlines()
        predicted = [json.loads(line)["pred"] for line in lines if line.strip()]
    canonical = json.dumps(predicted, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _task_data(matrix: Matrix, t: dict):
    """The task's TaskData; ``max_eval_examples`` keeps the first N evaluation examples (smoke runs)."""
    task = read_task(matrix, t)
    if t.get("max_eval_examples"):
        task.dev = task.dev[: int(t["max_eval_examples"])]
    return task


def train_source(matrix: Matrix, t: dict) -> tuple:
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


def read_task(matrix: Matrix, t: dict):
    source = train_source(matrix, t)
    if t["kind"] == "glue":
        from bertkit.tasks.glue import glue_task_data

        return glue_task_data(source[1], source[2])
    if t["kind"] == "ner":
        from bertkit.tasks.ner import ner_task_data

        root = data_root(matrix)
        return ner_task_data(source[1], root / t.get("dev", "conll2003/valid.txt"),
                             root / t["test"] if t.get("test") else None, name=t["name"])  # fmt: skip
    raise UserError(f"task {t['name']}: kind {t['kind']!r} has no reader here")


def squad_train_part(matrix: Matrix, t: dict) -> dict:
    """The training articles of a SQuAD [[task]] (the file minus its last ``dev_articles``), as ``_squad``
    trains on them."""
    from bertkit.tasks.squad import load_squad_json
    from bertkit.tasks.squad_train import split_articles

    _, file, dev_articles, train_articles = train_source(matrix, t)
    return split_articles(load_squad_json(file), dev_articles, train_articles)[0]


def _squad(matrix, t: dict, model_dir: Path, work: Path, lr: float, seed: int, progress: bool,
           resume: bool) -> dict:  # fmt: skip
    from bertkit.tasks.squad_train import run

    _, file, dev_articles, train_articles = train_source(matrix, t)
    args = argparse.Namespace(
        train=str(file), dev=None, version=str(t.get("version", "1.1")),
        dev_articles=dev_articles, train_articles=train_articles,
        model=str(model_dir), out=str(work), epochs=float(t.get("epochs", 2)), batch_size=int(t.get("batch_size", 32)),
        lr=lr, max_seq_length=int(t.get("max_seq_length", 256)), seed=int(seed), doc_stride=int(t.get("doc_stride", 128)),
        max_query_length=int(t.get("max_query_length", 64)), n_best_size=20, max_answer_length=30, null_score_diff_threshold=0.0,
        eval_batch_size=int(t.get("eval_batch_size", 64)), warmup_ratio=float(t.get("warmup_ratio", 0.1)),
        quiet=not progress, checkpoint_every=CHECKPOINT_EVERY, resume=resume, precision="fp32", weight_decay=0.01,
    )  # fmt: skip
    return run(args)


def run_features(matrix, cell, out, done, progress) -> dict:
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
        n_layers = model_shape(model_dir)["num_hidden_layers"]
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
