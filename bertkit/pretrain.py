"""Pre-training: data (``bertkit prepare`` shards) -> BertForPreTraining -> the generic trainer -> HF model dir.

``pretrain(PretrainConfig(...))`` (or ``bertkit pretrain``) runs one or more *phases*. Each phase has its
own sequence length, batch size, number of steps and masking settings; the optimizer, the learning-rate
schedule (linear warm-up + linear decay over the steps of all phases) and the model carry over, which is
the paper's two-phase recipe (90% of steps at 128 tokens, then 10% at 512)::

    # pretrain.toml
    preset = "base"
    objective = "mlm+nsp"
    lr = 1e-4
    warmup = 10000
    [[phases]]
    steps = 900000
    max_seq_length = 128
    batch_size = 256
    [[phases]]
    steps = 100000
    max_seq_length = 512
    batch_size = 256
    max_predictions_per_seq = 80

Objectives (:mod:`bertkit.objectives`): ``mlm+nsp`` (the paper), ``mlm`` (the "No NSP" ablation: single-segment
inputs), ``ltr`` (the "LTR & No NSP" ablation: a causal encoder predicting every next token from unmasked
inputs), ``roberta`` (RoBERTa's recipe: no NSP, full sentences packed across documents) and ``electra``
(replaced-token detection with a small generator). An objective's own settings go in an
``[objective_options]`` table (e.g. ``generator_fraction = 0.25`` for electra).

Output layout of ``RUN_DIR``: ``metrics.jsonl``, ``eval.jsonl``, ``curves.png``, ``checkpoints/`` (one
phase) or ``phase-N/...`` (several), ``model/`` (config.json, model.safetensors, vocab.txt - loadable by
transformers' ``BertForPreTraining.from_pretrained``), ``run_config.json`` (the settings, and the per-machine
choices the run computes with: ``choices``, taken back by ``--resume``) and ``results.json``.

``--batch-size`` is the *global* batch per optimizer step: it is split over ``torchrun`` processes and
``grad_accum`` micro-steps (it must divide evenly). Under ``torchrun`` (``WORLD_SIZE`` > 1) the process
group is initialised here (NCCL on GPU, gloo on CPU); ranks read disjoint parts of every global batch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bertkit.config import BertConfig
from bertkit.data.shard_build import vocab_tokens
from bertkit.data.static import detect_format, open_static
from bertkit.errors import UserError
from bertkit.io import atomic_write_json, read_text
from bertkit.objectives import Objective, get_objective, objective_class
from bertkit.train.batches import Batches
from bertkit.train.checkpoint import latest_checkpoint
from bertkit.train.distributed import init_distributed
from bertkit.train.loop import Trainer, to_device
from bertkit.train.optim import build_optimizer, linear_schedule, warmup_steps_from
from bertkit.train.options import Checkpointing, Numerics, Parallel, Reporting, Schedule
from bertkit.validate import check_device, check_field_types, check_values

logger = logging.getLogger("bertkit")

# Learning rate, warm-up, batch size and masking rate when the config leaves them unset (None). ``recipe =
# "cpu"`` (the default for the small presets) is what learned the most per CPU-second on 2 cores (docs/results/paper-mini.md
# "Recipe", docs/results/checkpoint-probe.md): small models trained for a few thousand steps want a 5-10x larger peak
# rate than BERT-Base's 1e-4 (tiny: 1e-3 beat 5e-4 and 2e-3; mini: 5e-4 beat 1e-3; small, not probed, follows
# the rate-times-width rule), a short warm-up, small batches (more updates for the same tokens: batch 16
# reached a lower held-out loss per CPU-second than 32), and 40% of the tokens masked instead of 15% (Wettig
# et al., 2023): BERT first reads its context as a bag of words, and BERT-tiny started to read word order (a
# word-order gain >= 0.1 nats) by step 4,000 with 40% masked instead of step 8,000 with 15% (docs/checkpoint-
# probe.md), at about a third more CPU per step (docs/results/paper.md, pre-training table). ``recipe = "paper"`` (the
# default for medium/base/large; ``--recipe paper``) is the paper's lr 1e-4, warm-up over 1% of the steps
# (10,000 of 1M), batch 256 and 15% masked. The 80/10/10 replacement rule is the paper's in both.
RECIPES: dict[str, dict[str, dict[str, float]]] = {
    "cpu": {
        "tiny": {"lr": 1e-3, "warmup": 0.06, "batch_size": 16, "masked_lm_prob": 0.4},
        "mini": {"lr": 5e-4, "warmup": 0.06, "batch_size": 16, "masked_lm_prob": 0.4},
        "small": {"lr": 2.5e-4, "warmup": 0.06, "batch_size": 16, "masked_lm_prob": 0.4},
    },
    "paper": {},
}
PAPER_RECIPE = {"lr": 1e-4, "warmup": 0.01, "batch_size": 256, "masked_lm_prob": 0.15}


def max_predictions_for(masked_lm_prob: float, max_seq_length: int) -> int:
    """The cap on masked tokens per sequence when none is set: the original release's rule of thumb
    (``max_predictions_per_seq`` = 20 for 15% of 128 tokens), ``round(prob * length) + 1``."""
    return max(1, round(masked_lm_prob * max_seq_length) + 1)


PHASE_KEYS = (
    "steps",
    "max_seq_length",
    "batch_size",
    "masked_lm_prob",
    "max_predictions_per_seq",
    "short_seq_prob",
    "whole_word_mask",
    "grad_accum",
)


# field -> the check its value must pass (bertkit.validate); flags and config files both go through them
_VALUE_CHECKS = {
    "steps": "positive_int", "batch_size": "positive_int", "grad_accum": "positive_int",
    "max_seq_length": "positive_int", "masked_lm_prob": "open_probability", "max_predictions_per_seq":
    "positive_int", "short_seq_prob": "probability", "lr": "positive_float", "warmup": "non_negative_float",
    "weight_decay": "non_negative_float", "clip_norm": "non_negative_float", "log_every": "positive_int",
    "checkpoint_every": "non_negative_int", "keep_last": "non_negative_int", "eval_every": "non_negative_int",
    "eval_batches": "non_negative_int", "eval_batch_size": "positive_int", "valid_documents": "non_negative_int",
    "num_threads": "positive_int",
}  # fmt: skip


@dataclass
class PretrainConfig:
    data: str = ""
    out: str = "runs/pretrain"
    preset: str = "mini"
    model_config: str | None = None  # a config.json (HF names) instead of a preset
    model_overrides: dict[str, Any] = field(default_factory=dict)
    init_from: str | None = None  # continue from a saved model dir
    objective: str = "mlm+nsp"
    objective_options: dict[str, Any] = field(default_factory=dict)  # the objective's own settings
    steps: int = 1000
    batch_size: int | None = None  # global batch; None: from the recipe (see RECIPES)
    grad_accum: int = 1
    max_seq_length: int = 128
    masked_lm_prob: float | None = None  # None: from the recipe (cpu 0.4, paper 0.15; see RECIPES)
    max_predictions_per_seq: int | None = None  # None: max_predictions_for(masked_lm_prob, max_seq_length)
    short_seq_prob: float = 0.1
    whole_word_mask: bool = False
    lr: float | None = None  # None: from the recipe (see RECIPES)
    warmup: float | None = None  # < 1: fraction of all steps; >= 1: steps; None: from the recipe
    recipe: str = "auto"  # auto (cpu for tiny/mini/small, paper otherwise), cpu, paper
    weight_decay: float = 0.01
    optimizer: str = "adamw"
    clip_norm: float = 1.0
    precision: str = "fp32"
    gradient_checkpointing: bool = False  # recompute encoder layers in backward (long phases, less memory)
    device: str | None = None
    distributed: str = "ddp"
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 200
    keep_last: int = 2
    eval_every: int = 0
    eval_batches: int = 10
    eval_batch_size: int | None = None
    valid_documents: int | None = None
    tensorboard: bool = False
    progress: bool = True
    nonfinite: str = "skip"
    phases: list[dict[str, Any]] = field(default_factory=list)
    num_threads: int | None = None
    # The data stream: "auto" (a prepared dir's static instances if `prepare --static` wrote them, else the
    # dynamic stream; an .npz file: static; anything else: TFRecord), "dynamic", "static" or "tfrecord".
    data_format: str = "auto"
    vocab: str | None = None  # vocab.txt for TFRecord data (a prepared dir has its own)
    lowercase: bool | None = None  # the saved tokenizer's casing (default: the prepared dir's, else True)

    def with_recipe(self) -> PretrainConfig:
        """A copy with ``lr``, ``warmup``, ``batch_size`` and ``masked_lm_prob`` filled from the recipe where
        they are unset, and ``max_predictions_per_seq`` from the masking rate and ``max_seq_length`` (phases
        inherit it unless they set their own, as the original release's flags do)."""
        if self.recipe not in ("auto", "cpu", "paper"):
            raise UserError(f"recipe must be auto, cpu or paper, not {self.recipe!r}")
        name = self.recipe
        if name == "auto":
            name = "cpu" if self.preset in RECIPES["cpu"] and not self.model_config else "paper"
        values = RECIPES[name].get(self.preset, PAPER_RECIPE) if name == "cpu" else PAPER_RECIPE
        # an objective's own defaults (e.g. ELECTRA's 15% masked) come before the recipe's
        values = {**values, **objective_class(self.objective).setting_defaults}
        prob = values["masked_lm_prob"] if self.masked_lm_prob is None else self.masked_lm_prob
        cap = self.max_predictions_per_seq
        return dataclasses.replace(
            self,
            lr=values["lr"] if self.lr is None else self.lr,
            warmup=values["warmup"] if self.warmup is None else self.warmup,
            batch_size=int(values["batch_size"]) if self.batch_size is None else self.batch_size,
            masked_lm_prob=prob,
            max_predictions_per_seq=max_predictions_for(prob, self.max_seq_length) if cap is None else cap,
        )

    def resolved_phases(self) -> list[dict[str, Any]]:
        """Every phase with its settings filled from the top level, unset ones from the recipe first
        (:meth:`with_recipe`)."""
        filled = self.with_recipe()
        base = {k: getattr(filled, k) for k in PHASE_KEYS}
        out = []
        for i, ph in enumerate(self.phases or [{}]):
            unknown = set(ph) - set(PHASE_KEYS)
            if unknown:
                raise UserError(
                    f"phase {i + 1}: unknown setting(s) {sorted(unknown)}; a phase may set {list(PHASE_KEYS)}"
                )
            out.append({**base, **ph})
        return out

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides: Any) -> PretrainConfig:
        data = load_config_file(path)
        return cls.from_dict(
            {**data, **{k: v for k, v in overrides.items() if v is not None}}, source=str(path)
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> PretrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise UserError(f"{source}: unknown setting(s) {sorted(unknown)}; known: {sorted(names)}")
        check_field_types(cls, data, source)
        check_values(data, _VALUE_CHECKS, source)
        for i, ph in enumerate(data.get("phases") or []):
            if not isinstance(ph, dict):
                raise UserError(f"{source}: phases[{i + 1}] must be a table of settings")
            check_values(ph, _VALUE_CHECKS, f"{source}: phase {i + 1}")
        return cls(**data)


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A TOML (``tomllib``; ``tomli`` before 3.11) or YAML (needs PyYAML) file as a dict."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: config file not found")
    text = read_text(path, "config file")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise UserError(f"{path}: YAML configs need PyYAML (pip install pyyaml), or use TOML") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise UserError(f"{path}: invalid YAML: {e}") from None
    else:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise UserError(f"{path}: invalid TOML: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: the top level must be a table of settings")
    # allow a [model] table of BertConfig overrides
    if "model" in data and isinstance(data["model"], dict):
        data["model_overrides"] = {**data.get("model_overrides", {}), **data.pop("model")}
    return data


# ---------------------------------------------------------------------------------------------- pieces


def build_model_config(cfg: PretrainConfig, vocab_size: int, max_seq_length: int) -> BertConfig:
    """The model's config: a preset or ``--model-config`` (a ModernBERT one when its ``model_type`` says so), with
    the ``[model]`` overrides, the data's vocabulary size, and positions enough for ``max_seq_length``."""
    if cfg.model_config:
        try:
            kind = json.loads(read_text(cfg.model_config, "model config")).get("model_type")
        except (json.JSONDecodeError, AttributeError):
            kind = None  # BertConfig's own reader says what is wrong with the file
        if kind == "modernbert":
            from bertkit.modernbert_config import ModernBertConfig

            mc = ModernBertConfig.from_json_file(cfg.model_config)
            mc.sparse_prediction = True  # the masked-LM head only at the masked positions, as BERT's
        else:
            mc = BertConfig.from_json_file(cfg.model_config)
        for k, v in cfg.model_overrides.items():
            setattr(mc, k, v)
    else:
        mc = BertConfig.preset(cfg.preset, **cfg.model_overrides)
    if mc.vocab_size != vocab_size:
        mc.vocab_size = vocab_size
    if mc.max_position_embeddings < max_seq_length:
        raise UserError(
            f"max_seq_length {max_seq_length} exceeds the model's max_position_embeddings "
            f"{mc.max_position_embeddings}; lower max_seq_length or raise max_position_embeddings"
        )
    return mc


def make_loss_fn(objective: str | Objective, pad_token_id: int = 0):
    """``loss_fn(model, batch) -> (loss, metrics)`` for the trainer: the objective's loss."""
    if isinstance(objective, str):
        objective = get_objective(objective, pad_token_id=pad_token_id)
    return objective.loss


def make_eval_fn(
    dataset, objective: str | Objective, batch_size: int, max_batches: int, device, pad_token_id: int = 0
):
    """Evaluate on a fixed held-out set: the first ``max_batches`` batches of ``dataset`` in order."""
    loss_fn = make_loss_fn(objective, pad_token_id)
    n = min(len(dataset), batch_size * max_batches)

    def eval_fn(model):
        sums: dict[str, list[float]] = {}
        total_loss, batches = 0.0, 0
        for start in range(0, n, batch_size):
            items = [dataset[i] for i in range(start, min(start + batch_size, n))]
            batch = to_device(dataset.collate(items), device)
            loss, mets = loss_fn(model, batch)
            total_loss += float(loss)
            batches += 1
            for k, (a, b) in mets.items():
                acc = sums.setdefault(k, [0.0, 0.0])
                acc[0] += a
                acc[1] += b
        res = {"loss": total_loss / max(batches, 1)}
        res.update({k: a / b for k, (a, b) in sums.items() if b})
        res["examples"] = n
        return res

    return eval_fn


def _load_dataset(
    data_dir: str,
    phase: dict,
    cfg: PretrainConfig,
    split: str,
    fmt: str = "dynamic",
    pad_id=0,
    objective: Objective | None = None,
):
    objective = objective or get_objective(cfg.objective, cfg.objective_options)
    no_nsp = not objective.next_sentence
    if fmt != "dynamic":
        if objective.pack_documents:
            raise UserError(
                f"objective {objective.name} packs documents on the fly: it needs a `bertkit prepare` directory "
                f"read as the dynamic stream, not {fmt} instances"
            )
        if split != "train":  # the fixed instances cover every document: nothing is held out
            raise UserError(f"no held-out split in {fmt} data {data_dir}")
        ds = open_static(data_dir, fmt, no_nsp=no_nsp, pad_id=pad_id)
        if ds.max_seq_length > phase["max_seq_length"]:
            raise UserError(
                f"{ds.name}: instances have {ds.max_seq_length} tokens > max_seq_length {phase['max_seq_length']}; "
                f"pass --max-seq-length {ds.max_seq_length}"
            )
        if ds.max_predictions_per_seq != phase["max_predictions_per_seq"]:
            logger.info(
                "%s: max_predictions_per_seq %d comes from the data (setting %d ignored)",
                ds.name, ds.max_predictions_per_seq, phase["max_predictions_per_seq"],
            )  # fmt: skip
        return ds
    from bertkit.data.dynamic import PretrainingDataset

    # Every rank builds the whole split: Batches gives each rank its part of every global batch, so the
    # stream is the same whatever the number of processes.
    return PretrainingDataset(
        data_dir,
        max_seq_length=phase["max_seq_length"],
        masked_lm_prob=phase["masked_lm_prob"],
        max_predictions_per_seq=phase["max_predictions_per_seq"],
        short_seq_prob=phase["short_seq_prob"],
        seed=cfg.seed,
        no_nsp=no_nsp,
        pack_documents=objective.pack_documents,
        whole_word_mask=phase["whole_word_mask"],
        split=split,
        valid_documents=cfg.valid_documents,
    )


def _device(cfg: PretrainConfig, local_rank: int) -> torch.device:
    if cfg.device:  # from a config file too: a missing GPU is one line, not a traceback from the first step
        return torch.device(check_device(cfg.device))
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------- driver


def pretrain(cfg: PretrainConfig, resume: bool = False, callbacks=()) -> dict:
    """Run every phase of ``cfg``; returns the results dict (also written to ``OUT/results.json``)."""
    objective_class(cfg.objective)  # an unknown name is refused before anything else
    cfg = cfg.with_recipe()
    data_dir = Path(cfg.data)
    fmt = detect_format(data_dir, cfg.data_format)
    if fmt == "dynamic" and not (data_dir / "manifest.json").is_file():
        raise UserError(f"{data_dir}: not a prepared data directory (run `bertkit prepare` first)")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    rank, world, local_rank = init_distributed()
    device = _device(cfg, local_rank)
    out = Path(cfg.out)
    phases = cfg.resolved_phases()
    total_steps = sum(int(p["steps"]) for p in phases)
    if total_steps <= 0:
        raise UserError("steps must be positive")

    vocab_file = Path(cfg.vocab) if cfg.vocab else _data_vocab(data_dir)
    if not vocab_file.is_file():
        raise UserError(
            f"{vocab_file}: vocabulary not found; pass --vocab VOCAB.txt (the one the data was made with)"
        )
    vocab_words = vocab_tokens(vocab_file)  # the special tokens checked too
    if vocab_file.suffix.lower() == ".json" and any(p["whole_word_mask"] for p in phases):
        # words are found by WordPiece's "##" pieces; byte-level BPE marks a word's start instead
        raise UserError(
            f"whole_word_mask: {vocab_file} is a BPE tokenizer; whole words are found in WordPiece data only"
        )
    manifest_file = data_dir / "manifest.json"
    manifest = {}
    if manifest_file.is_file():
        try:
            manifest = json.loads(read_text(manifest_file, "manifest"))
        except json.JSONDecodeError as e:
            raise UserError(
                f"{manifest_file}:{e.lineno}: not valid JSON ({e.msg}); re-run `bertkit prepare --resume`"
            ) from None
        if not isinstance(manifest, dict):
            raise UserError(f"{manifest_file}: expected a JSON object; re-run `bertkit prepare`")
    if cfg.lowercase is not None:
        manifest["lowercase"] = cfg.lowercase
    pad_id = vocab_words.index("[PAD]") if "[PAD]" in vocab_words else 0
    mask_id = vocab_words.index("[MASK]") if "[MASK]" in vocab_words else 103
    objective = get_objective(
        cfg.objective, cfg.objective_options, pad_token_id=pad_id, mask_token_id=mask_id
    )
    mc = build_model_config(cfg, len(vocab_words), max(p["max_seq_length"] for p in phases))
    mc.pad_token_id = pad_id
    _special_ids(mc, vocab_words)
    objective.configure(mc)

    torch.manual_seed(cfg.seed)  # model initialisation
    model = objective.build_model(mc, cfg.init_from)
    if cfg.init_from and model.config.vocab_size != len(vocab_words):
        raise UserError(
            f"--init-from {cfg.init_from}: its vocabulary has {model.config.vocab_size} entries, the data's "
            f"{vocab_file} {len(vocab_words)}: the ids would mean other words; prepare the data with the model's "
            "vocab.txt"
        )
    if cfg.gradient_checkpointing:
        for module in model.modules():
            if hasattr(module, "gradient_checkpointing_enable") and module is not model:
                module.gradient_checkpointing_enable()
    model.to(device)
    run_config = out / "run_config.json"
    if resume and run_config.is_file():
        # a resumed run keeps the record of how it was started, and computes with the choices it recorded
        _resume_choices(run_config)
    elif rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            run_config,
            {
                **dataclasses.asdict(cfg),
                "world_size": world,
                "choices": _machine_choices(device, cfg.precision),
            },
        )

    def make_opt(m):
        return build_optimizer(m, cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay)

    def make_sched(o):
        return linear_schedule(o, warmup_steps_from(cfg.warmup, total_steps), total_steps)

    results: dict[str, Any] = {
        "phases": [], "world_size": world, "objective": cfg.objective, "data_format": fmt, "device": str(device),
    }  # fmt: skip
    opt = sched = None
    start = 0
    trainer = None
    for i, ph in enumerate(phases):
        end = start + int(ph["steps"])
        run_dir = out if len(phases) == 1 else out / f"phase-{i + 1}"
        micro, rem = divmod(int(ph["batch_size"]), world * int(ph["grad_accum"]))
        if rem or micro < 1:
            raise UserError(
                f"batch_size {ph['batch_size']} must be a multiple of world_size*grad_accum = "
                f"{world}*{ph['grad_accum']}"
            )
        train_ds = _load_dataset(str(data_dir), ph, cfg, "train", fmt, pad_id, objective)
        if len(train_ds) < micro * world * int(ph["grad_accum"]):
            held = getattr(train_ds, "valid_documents", None)
            raise UserError(
                f"{data_dir}: the training split has {len(train_ds)} instances of {ph['max_seq_length']} tokens, "
                f"fewer than one global batch of {ph['batch_size']}"
                + (f" ({held} documents are held out for evaluation)" if held else "")
                + "; use more text, a smaller --batch-size, or fewer --valid-documents"
            )
        batches = Batches(
            train_ds, micro, train_ds.collate, seed=cfg.seed, rank=rank, world_size=world,
            grad_accum=int(ph["grad_accum"]),
        )  # fmt: skip
        eval_fn = None
        if cfg.eval_every or cfg.eval_batches:
            try:
                valid_ds = _load_dataset(str(data_dir), ph, cfg, "valid", fmt, pad_id, objective)
                eval_fn = make_eval_fn(
                    valid_ds, objective, cfg.eval_batch_size or micro, cfg.eval_batches, device, pad_id
                )
            except UserError as e:
                logger.warning("no held-out evaluation: %s", e)
        trainer = Trainer(
            model,
            opt if opt is not None else make_opt,
            sched if sched is not None else make_sched,
            train_batches=batches,
            out_dir=run_dir,
            schedule=Schedule(
                max_steps=end,
                grad_accum=int(ph["grad_accum"]),
                eval_every=cfg.eval_every,
                seed=cfg.seed + 7919 * i,
            ),
            numerics=Numerics(precision=cfg.precision, clip_norm=cfg.clip_norm, nonfinite=cfg.nonfinite),
            reporting=Reporting(
                log_every=cfg.log_every,
                progress=cfg.progress,
                tensorboard=cfg.tensorboard,
                desc=f"pretrain{'' if len(phases) == 1 else f' phase {i + 1}/{len(phases)}'}",
            ),
            checkpointing=Checkpointing(checkpoint_every=cfg.checkpoint_every, keep_last=cfg.keep_last),
            parallel=Parallel(
                strategy=cfg.distributed, find_unused_parameters=objective.find_unused_parameters
            ),
            device=device,
            loss_fn=objective.loss,
            eval_fn=eval_fn,
            callbacks=callbacks,
        )
        opt, sched = trainer.optimizer, trainer.scheduler
        own = latest_checkpoint(run_dir) if resume else None
        if own is None:
            trainer.step = start  # the model, optimizer and schedule carry over from the previous phase
        elif own[1]["step"] >= end:
            logger.info("phase %d already complete (%s)", i + 1, own[0])
            trainer.load_state_dict(own[1], data=True)
            start = end
            continue
        summary = trainer.fit(resume=own is not None)
        summary["phase"] = i + 1
        summary["max_seq_length"] = ph["max_seq_length"]
        summary["batch_size"] = ph["batch_size"]
        results["phases"].append(summary)
        start = end
        if world > 1:
            dist.barrier()

    if len(phases) > 1 and rank == 0:
        _merge_logs(out, len(phases))
    model_dir = out / "model"
    export = model
    if trainer is not None and trainer._fsdp:  # gather the shards (every rank takes part)
        full = trainer.full_model_state()
        if rank == 0:
            export = objective.build_model(model.config)
            export.load_state_dict(full)
    if rank == 0:
        for folder in objective.save(export, model_dir) or [model_dir]:
            save_tokenizer(
                vocab_file,
                bool(manifest.get("lowercase", True)),
                folder,
                export.config.max_position_embeddings,
            )
    last = results["phases"][-1] if results["phases"] else {}
    results.update(
        {
            "model_dir": str(model_dir),
            "steps": total_steps,
            "last": last.get("last"),
            "eval": last.get("eval"),
            "metrics_jsonl": str(out / "metrics.jsonl"),
            "curves_png": str(out / "curves.png"),
        }
    )
    if rank == 0:
        _write_card(cfg, objective, export.config, model_dir, fmt, phases, results, world)
        atomic_write_json(out / "results.json", results)
    return results


def _machine_choices(device: torch.device, precision: str) -> dict[str, str | None]:
    """The per-machine choices a new run computes with, made now (from this machine's cache where
    ``bertkit tune`` or an earlier run recorded them; :mod:`bertkit.tuning`) so that the run config records
    them: the fp32 GEMM backend on a CPU (None on a GPU, whose GEMMs are torch's) and, where the run may
    compute in bf16 on a CPU, how bf16 attention runs."""
    from bertkit.kernels import attention, gemm

    if device.type != "cpu":
        return {"linear": None}
    bf16 = attention.bf16_attention() if precision != "fp32" else None
    return {"linear": gemm.backend_name(), "bf16_attention": bf16}


def _resume_choices(run_config: Path) -> None:
    """Compute with the choices ``run_config`` recorded (a run config from before they were: the machine's)."""
    from bertkit.kernels import attention, gemm

    try:
        recorded = json.loads(read_text(run_config, "run config")).get("choices") or {}
    except (json.JSONDecodeError, AttributeError):
        raise UserError(f"{run_config}: not a run config bertkit wrote; start a new --out") from None
    gemm.resume_backend(recorded.get("linear"), source="the run config")
    attention.resume_bf16_attention(recorded.get("bf16_attention"), source="the run config")


def _shape_name(cfg: PretrainConfig, config: Any) -> str:
    """What the card calls the model: the preset or config file, and the shape it really has when a [model]
    table changed it (``mini, changed to L2/H64/A2``)."""
    name = cfg.model_config or cfg.preset
    if not cfg.model_overrides:
        return name
    shape = f"L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}"
    return f"{name}, changed to {shape} by [model] " + ", ".join(
        f"{k}={v}" for k, v in cfg.model_overrides.items()
    )


def _write_card(
    cfg: PretrainConfig,
    objective: Objective,
    model_config: Any,
    model_dir: Path,
    fmt: str,
    phases: list,
    results: dict,
    world: int,
) -> None:
    from bertkit.architectures import display_name
    from bertkit.model_card import write_model_card

    held_out = results.get("eval")
    scores = held_out or results.get("last") or {}
    write_model_card(
        model_dir, title=objective.card_title(display_name(model_dir)), kind="pretraining",
        task=f"pre-training, objective {cfg.objective} ({objective.summary})",
        data={"data": cfg.data, "stream": fmt, "held-out documents": cfg.valid_documents},
        hyperparameters={
            "model": _shape_name(cfg, model_config), "steps": results["steps"], "lr": cfg.lr, "warmup": cfg.warmup,
            "optimizer": cfg.optimizer, "weight_decay": cfg.weight_decay, "precision": cfg.precision,
            "seed": cfg.seed, "processes": world, "init_from": cfg.init_from,
            "phases": [{k: p[k] for k in ("steps", "max_seq_length", "batch_size", "grad_accum")} for p in phases],
        },
        metrics={k: v for k, v in scores.items() if k != "step" and isinstance(v, (int, float))},
        metrics_split="held-out" if held_out else "training, last log window",
        base_model=cfg.init_from,
    )  # fmt: skip


def _data_vocab(data_dir: Path) -> Path:
    """The vocabulary a prepared directory's ids refer to: its vocab.txt, or the BPE tokenizer.json
    ``bertkit prepare --vocab tokenizer.json`` copied there."""
    bpe = data_dir / "tokenizer.json"
    return bpe if bpe.is_file() and not (data_dir / "vocab.txt").is_file() else data_dir / "vocab.txt"


def _special_ids(mc: Any, vocab_words: list[str]) -> None:
    """Point a config's [CLS]/[SEP] ids (ModernBERT's cls/bos, sep/eos) at the data's vocabulary: its
    defaults are the released tokenizer's ids, which a vocabulary trained here does not share."""
    for key, token in (("cls", "[CLS]"), ("bos", "[CLS]"), ("sep", "[SEP]"), ("eos", "[SEP]")):
        if hasattr(mc, f"{key}_token_id") and token in vocab_words:
            setattr(mc, f"{key}_token_id", vocab_words.index(token))


def save_tokenizer(
    vocab_file: Path, lowercase: bool, model_dir: Path, model_max_length: int | None = None
) -> None:
    """vocab.txt + tokenizer files beside the model, so ``Tokenizer``/transformers load them from the dir
    (a BPE tokenizer.json: it, with the configs that name its special tokens and ``model_max_length``, the
    model's positions: a ModernBERT's may be far more than 512)."""
    if vocab_file.suffix.lower() == ".json":
        from bertkit.tokenizer import BPETokenizer

        # no fallback here: a tokenizer.json that does not load is refused when the data is read, long before
        BPETokenizer.from_file(vocab_file, model_max_length or 512).save_pretrained(model_dir)
        return
    try:
        from bertkit.tokenizer import Tokenizer

        Tokenizer(str(vocab_file), lowercase=lowercase).save_pretrained(model_dir)
    except Exception as e:  # noqa: BLE001 - the vocabulary itself must be there whatever happens
        logger.warning("tokenizer files not written (%s); copying vocab.txt only", e)
        shutil.copyfile(vocab_file, model_dir / "vocab.txt")
        atomic_write_json(
            model_dir / "tokenizer_config.json",
            {"do_lower_case": lowercase, "tokenizer_class": "BertTokenizer"},
        )


def _merge_logs(out: Path, n: int) -> None:
    """Concatenate the phases' logs into ``OUT/metrics.jsonl`` / ``eval.jsonl`` and plot them together."""
    from bertkit.train.logs import plot_curves

    for name in ("metrics.jsonl", "eval.jsonl"):
        lines = []
        for i in range(1, n + 1):
            p = out / f"phase-{i}" / name
            if p.is_file():
                lines += [ln for ln in p.read_text().splitlines() if ln.strip()]
        with open(out / name, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + ("\n" if lines else ""))
    try:
        plot_curves(out / "metrics.jsonl", out / "eval.jsonl", out / "curves.png")
    except Exception as e:  # noqa: BLE001
        logger.warning("could not plot curves: %s", e)
