"""Pre-training cells: bertkit's own pre-training (its CPU clock, curve and held-out scores), a random
init, an existing model, and transformers' own pipeline in a subprocess.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from bertkit.errors import UserError
from bertkit.io import atomic_write_json
from lab.experiment.matrix import Cell, Matrix, prepare_cell_of, resolve
from lab.experiment.paths import external_model_dir, model_shape, prepared_data
from lab.experiment.results import portable
from lab.mlm_eval import heldout_mlm

CURVE_POINTS = 60


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
    from bertkit.pretrain import PretrainConfig
    from lab.experiment.matrix import pretrain_fields

    fields = set(pretrain_fields())
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


def run_settings(spec: dict, base: Path) -> str:
    """The cell's settings as kept in RUN_DIR/cell.json, which decides whether a killed run resumes: files
    under the matrix's folder named relative to it, so a checkout elsewhere (a worktree, a clone) resumes."""
    return json.dumps(portable(spec, [base]), sort_keys=True, default=str)


def run_pretrain(matrix, cell, out, done, progress) -> dict:
    from bertkit.pretrain import pretrain
    from bertkit.train.checkpoint import latest_checkpoint

    spec = cell.spec
    run_dir = out / cell.name
    if spec.get("runner") == "transformers":
        return run_transformers(matrix, cell, out, done, progress)
    cfg = _pretrain_config(matrix, cell, out, progress)
    settings = run_settings(cell.spec, matrix.base)
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
    elif cfg.objective == "electra":
        # the saved encoder is the discriminator (no masked-LM head): its held-out score is replaced-token
        # detection on the held-out documents, from the run's own final evaluation; the masked-LM scores and
        # word-order gain beside it are the generator's, scored as every other model's
        held = dict(res.get("eval") or {})
        held |= heldout_mlm(
            run_dir / "model", prepared_data(out, "prepare"), cfg.max_seq_length, cfg.valid_documents
        )
        primary = held.get("replaced_token_accuracy")
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
                # the whole chain's tokens before this link (a continued model may be continued again)
                "tokens_before": done[f"pretrain/{spec['continue_from']}"]["tokens"]
                + (done[f"pretrain/{spec['continue_from']}"].get("tokens_before") or 0),
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
        "model_config": model_shape(run_dir / "model"),
        "curve": _curve(run_dir, cfg.batch_size * cfg.max_seq_length),
        "model_dir": str(run_dir / "model"),
    }


def run_random(matrix, cell, out, done, progress) -> dict:
    """A model at its initialisation (the baseline every arm must beat): BERT's preset, or the shape of the
    cell's ``model_config`` (a random ModernBERT for a ModernBERT arm), with the prepared data's vocabulary."""
    from bertkit.architectures import pretraining_class
    from bertkit.modernbert_config import ModernBertConfig
    from bertkit.pretrain import build_model_config, save_tokenizer

    cfg = _pretrain_config(matrix, cell, out, progress)
    data = prepared_data(out, "prepare")
    vocab = data / "vocab.txt"
    mc = build_model_config(cfg, len(vocab.read_text(encoding="utf-8").splitlines()), cfg.max_seq_length)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(cfg.seed)  # the model's initialisation (as pre-training's) draws from torch's generator
    model = pretraining_class(isinstance(mc, ModernBertConfig))(mc)
    torch.random.set_rng_state(gen_state)
    model_dir = out / cell.name / "model"
    model.save_pretrained(model_dir)
    save_tokenizer(vocab, True, model_dir)
    held = heldout_mlm(model_dir, data, cfg.max_seq_length, cfg.valid_documents)
    return {"model": cell.spec["name"], "objective": "none (random init)", "preset": cfg.preset, "seed": cfg.seed,
            "primary": round(100 * held["mlm_accuracy"], 2), "metrics": held, "tokens": 0,
            "model_config": model_shape(model_dir), "model_dir": str(model_dir)}  # fmt: skip


def run_pretrained(matrix, cell, out, done, progress) -> dict:
    spec = cell.spec
    model_dir = external_model_dir(matrix, spec)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"model {spec['name']}: no config.json in {model_dir}")
    return {"model": spec["name"], "primary": None, "tokens": None, "model_dir": str(model_dir),
            "model_config": model_shape(model_dir)}  # fmt: skip


def run_transformers(matrix, cell, out, done, progress) -> dict:
    """transformers' own pipeline (BertForMaskedLM + DataCollatorForLanguageModeling + Trainer) in a
    subprocess, given the same process CPU seconds as the bertkit run named by ``same_cpu_as``."""
    spec = cell.spec
    ref = done[f"pretrain/{spec['same_cpu_as']}"]
    budget = float(ref["train_cpu_s"])
    run_dir = out / cell.name
    shutil.rmtree(run_dir, ignore_errors=True)  # no resume: a CPU budget cannot be split across sittings
    run_dir.mkdir(parents=True)
    cfg = _pretrain_config(matrix, cell, out, progress)
    script = resolve(matrix.base, spec.get("script", "transformers_mlm.py"))
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
            "hyperparameters": rep.get("hyperparameters"), "model_config": model_shape(run_dir / "model"),
            "model_dir": str(run_dir / "model")}  # fmt: skip
