"""Distillation: a fine-tuned teacher -> a smaller student (``bertkit distill``).

Students: ``layers`` of the teacher (DistilBERT's recipe: the embeddings, the chosen Transformer layers, the
pooler and the head are copied; e.g. layers 0, 2, 4 of six), or a smaller ``preset`` of the teacher's
architecture (BERT or ModernBERT; ``bert:PRESET`` a BERT one whatever the teacher) trained from a random
start (same vocabulary, the teacher's tokenizer, and labels).

Losses: sequence and token classification use Hinton et al.'s soft targets plus the hard labels,
``alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(student, labels)``
(token tasks over the labelled positions only); sentence embeddings regress the teacher's vectors (MSE, as
sentence-transformers' MSELoss for model distillation; a Dense layer maps the student to the teacher's
dimension when they differ).

The report (``OUT/metrics.json``) sets teacher against student: parameters, size on disk, CPU latency at
batch 1 and throughput at batch 32 on dev examples, and the dev metric.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import UserError
from .io import atomic_write_json
from .model import num_parameters
from .train.simple import AdamWSettings

logger = logging.getLogger("bertkit")

BERT_PREFIX = "bert:"  # --student bert:PRESET: a BERT student, also for a ModernBERT teacher


@dataclass
class DistillSettings(AdamWSettings):
    temperature: float = 2.0
    alpha: float = 0.5  # weight of the soft-target loss (1 - alpha: the hard labels)
    epochs: float = 3.0
    lr: float = 5e-5
    max_seq_length: int = 128
    progress: bool = True


def parse_student(spec: str) -> tuple[list[int] | None, str | None]:
    """``"layers:0,2,4"`` -> ([0, 2, 4], None); ``"mini"`` -> (None, "mini"); ``"bert:mini"`` -> (None,
    "bert:mini") (a BERT student whatever the teacher's architecture)."""
    from .config import PRESETS

    if spec.startswith("layers:"):
        try:
            layers = [int(x) for x in spec.split(":", 1)[1].split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--student {spec!r}: expected layers:I,J,K (teacher layer numbers)") from None
        if not layers:
            raise UserError(f"--student {spec!r}: name at least one teacher layer")
        return layers, None
    if spec.removeprefix(BERT_PREFIX) not in PRESETS:
        raise UserError(
            f"--student {spec!r}: expected layers:I,J,K or a preset ({', '.join(PRESETS)}), or bert:PRESET"
        )
    return None, spec


def student_from_teacher(teacher: nn.Module, layers: Sequence[int]) -> nn.Module:
    """A copy of ``teacher`` keeping only Transformer ``layers`` (in the given order); every other weight
    (embeddings, pooler, head) is the teacher's."""
    from .architectures import encoder_of
    from .modernbert_config import ModernBertConfig

    n = teacher.config.num_hidden_layers
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise UserError(f"teacher has layers 0..{n - 1}; cannot take {bad}")
    student = copy.deepcopy(teacher)
    encoder = encoder_of(student)
    if isinstance(encoder.config, ModernBertConfig):
        _check_modernbert_layers(encoder.config, layers)
        encoder.layers = nn.ModuleList([encoder.layers[i] for i in layers])
    else:
        encoder.encoder.layer = nn.ModuleList([encoder.encoder.layer[i] for i in layers])
    student.config.num_hidden_layers = len(layers)
    if student.config is not encoder.config:
        encoder.config.num_hidden_layers = len(layers)
    return student


def _check_modernbert_layers(config: Any, layers: Sequence[int]) -> None:
    """A ModernBERT layer's kind (global or local attention, its rotary base) and its norm follow from its
    position: the chosen layers must keep the teacher's kind at their new positions, layer 0 first (the
    only one without an attention norm), or the saved student would not reload as trained."""
    spec = "layers:" + ",".join(map(str, layers))
    if layers[0] != 0:
        raise UserError(f"--student {spec}: a ModernBERT student starts with the teacher's layer 0 (the only "
                        "layer without an attention norm)")  # fmt: skip
    every = config.global_attn_every_n_layers
    for k, i in enumerate(layers):
        if config.is_global(i) != config.is_global(k):
            kind = "global" if config.is_global(i) else "local"
            raise UserError(
                f"--student {spec}: teacher layer {i} attends {kind}ly but would be student layer {k}, which "
                f"does not (global attention every {every} layers); pick layers that keep the pattern"
            )


def student_from_preset(teacher: nn.Module, preset: str, seed: int) -> nn.Module:
    """The teacher's class (``bert:PRESET``: BERT's) at a smaller preset size, randomly initialised from
    ``seed`` (the global RNG is left as it was), with the teacher's vocabulary size and label set."""
    from .architectures import class_of, head_of
    from .modernbert_config import ModernBertConfig

    name = preset.removeprefix(BERT_PREFIX)
    modernbert = isinstance(teacher.config, ModernBertConfig) and not preset.startswith(BERT_PREFIX)
    cfg = _modernbert_preset(teacher.config, name) if modernbert else _bert_preset(teacher.config, name)
    cls = class_of(head_of(type(teacher).__name__), modernbert)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(cfg)


def _bert_preset(config: Any, preset: str) -> Any:
    """A BERT config of ``preset`` size with ``config``'s vocabulary, labels and (up to 512) positions."""
    from .config import BertConfig

    keep = ("vocab_size", "id2label", "problem_type", "type_vocab_size", "pad_token_id")
    extra = {k: getattr(config, k) for k in keep if getattr(config, k, None) is not None}
    extra["max_position_embeddings"] = min(config.max_position_embeddings, 512)
    return BertConfig.preset(preset, **extra)


def _modernbert_preset(config: Any, preset: str) -> Any:
    """``config`` (a ModernBERT one) at ``preset``'s depth, width and heads, its MLP in the same proportion."""
    from .config import PRESETS

    layers, hidden, heads = PRESETS[preset]
    cfg = copy.deepcopy(config)
    ratio = config.intermediate_size / config.hidden_size
    cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads = layers, hidden, heads
    cfg.intermediate_size = max(1, round(ratio * hidden))
    cfg.architectures = None
    cfg.validate()
    return cfg


def soft_target_loss(
    student: Tensor, teacher: Tensor, labels: Tensor, temperature: float, alpha: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(total, soft, hard) for logits [N, C] (rows already restricted to the labelled positions).

    soft = T^2 * KL(softmax(teacher/T) || softmax(student/T)) averaged over rows (the T^2 keeps its
    gradient scale independent of T); hard = cross-entropy with ``labels`` [N]."""
    t = temperature
    soft = F.kl_div(
        F.log_softmax(student / t, -1), F.log_softmax(teacher / t, -1), reduction="batchmean", log_target=True
    )
    soft = soft * t * t
    hard = F.cross_entropy(student, labels)
    return alpha * soft + (1 - alpha) * hard, soft, hard


@torch.no_grad()
def speed(model: nn.Module, batches: Sequence[dict[str, Tensor]]) -> float:
    """Examples per second of ``model`` over ``batches`` (eval mode)."""
    model.eval()
    t0, n = time.perf_counter(), 0
    for b in batches:
        model(**b)
        n += b["input_ids"].shape[0]
    return n / (time.perf_counter() - t0)


def _timing_batches(feats: list, kind: str, size: int, count: int, pad_id: int) -> list[dict[str, Tensor]]:
    from .tasks.encoding import collate

    out = []
    for i in range(0, min(len(feats), size * count), size):
        b = collate(feats[i : i + size], kind, pad_id)
        b.pop("labels", None)
        out.append(b)
    return out


def cpu_busy(seconds: float = 3.0) -> float:
    """Fraction of the machine's CPU time (all cores) spent busy over the next ``seconds`` (Linux
    /proc/stat; NaN elsewhere): whether a speed measurement about to start has the machine to itself."""

    def read() -> tuple[int, int] | None:
        try:
            vals = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
        return sum(vals), idle

    a = read()
    time.sleep(seconds)
    b = read()
    if a is None or b is None or b[0] == a[0]:
        return float("nan")
    return 1.0 - (b[1] - a[1]) / (b[0] - a[0])


def compare_speed(
    models: dict[str, nn.Module], dev_feats: list, kind: str, pad_id: int, repeats: int = 1,
    busy_seconds: float = 1.0,
) -> dict[str, Any]:  # fmt: skip
    """CPU latency at batch 1 (64 examples) and throughput at batch 32 (8 batches) of each model, on the same
    dev features (the shortest quarter skipped: typical lengths), best of ``repeats`` interleaved rounds; plus the ratios of the
    second model to the first (the first two of ``models``) and the load on the machine just before
    (``cpu_busy_before``, over ``busy_seconds``: other work running makes the numbers contended)."""
    timing = sorted(dev_feats, key=len)[len(dev_feats) // 4 :]
    one, many = _timing_batches(timing, kind, 1, 64, pad_id), _timing_batches(timing, kind, 32, 8, pad_id)
    out: dict[str, Any] = {
        "cpu_busy_before": round(cpu_busy(busy_seconds), 3),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    models = {name: m.cpu() for name, m in models.items()}
    lat = dict.fromkeys(models, float("inf"))
    thr = dict.fromkeys(models, 0.0)
    for _ in range(repeats):  # interleaved, so a change of load mid-way hits every model alike
        for name, m in models.items():
            lat[name] = min(lat[name], 1000 / speed(m, one))
            thr[name] = max(thr[name], speed(m, many))
    for name in models:
        out[name] = {"latency_ms_batch1": round(lat[name], 2), "throughput_batch32": round(thr[name], 1)}
    base, other = (out[k] for k in list(models)[:2])
    out["speedup_batch32"] = other["throughput_batch32"] / base["throughput_batch32"]
    out["speedup_batch1"] = base["latency_ms_batch1"] / other["latency_ms_batch1"]
    return out


def remeasure_speed(
    teacher_dir: str | os.PathLike, student_dir: str | os.PathLike, task: Any, max_seq_length: int = 128,
    repeats: int = 3, busy_seconds: float = 3.0,
) -> dict[str, Any]:  # fmt: skip
    """:func:`compare_speed` of a finished distillation's teacher and student (``OUT/model``) alone, without
    training: to time them again when the machine is quiet."""
    from .architectures import head_class
    from .tasks.encoding import encode
    from .tokenizer import Tokenizer

    teacher = head_class(task.kind, teacher_dir).from_pretrained(teacher_dir).eval()
    student = head_class(task.kind, student_dir).from_pretrained(student_dir).eval()
    tok = Tokenizer.from_pretrained(teacher_dir)
    dev_feats = encode(task, tok, task.dev, max_seq_length)
    models = {"teacher": teacher, "student": student}
    return compare_speed(models, dev_feats, task.kind, tok.pad_token_id, repeats, busy_seconds)


def distill_task(
    teacher_dir: str | os.PathLike,
    student: str,
    task: Any,
    out_dir: str | os.PathLike,
    settings: DistillSettings,
    max_train_examples: int | None = None,
) -> dict[str, Any]:
    """Distil a fine-tuned sequence- or token-classification teacher into ``student`` (see
    :func:`parse_student`) on ``task`` (a :class:`bertkit.tasks.spec.TaskData`); writes ``OUT/model``,
    ``OUT/metrics.json``."""
    from .architectures import head_class
    from .tasks.encoding import collate, encode
    from .tasks.evaluation import evaluate
    from .tasks.spec import Settings
    from .tokenizer import Tokenizer

    s = settings
    if task.kind not in ("seq", "token") or task.labels is None or task.multi_label:
        raise UserError(
            f"distillation supports single-label sequence and token classification, not {task.name}"
        )
    if not 0 <= s.alpha <= 1 or not s.temperature > 0:
        raise UserError("--alpha must be in [0, 1] and --temperature > 0")
    out_dir = Path(out_dir)
    teacher = head_class(task.kind, teacher_dir).from_pretrained(teacher_dir).eval()
    if getattr(teacher, "crf", None) is not None:
        raise UserError(f"{teacher_dir}: a CRF teacher cannot be distilled yet; fine-tune it without --crf")
    if teacher.config.num_labels != len(task.labels):
        raise UserError(
            f"{teacher_dir}: the teacher has {teacher.config.num_labels} labels, the task {len(task.labels)}"
        )
    tok = Tokenizer.from_pretrained(teacher_dir)
    layers, preset = parse_student(student)
    model = student_from_teacher(teacher, layers) if layers else student_from_preset(teacher, preset, s.seed)
    if s.max_seq_length > model.config.max_tokens:
        raise UserError(
            f"--max-seq-length {s.max_seq_length} is longer than the student's {model.config.max_tokens} positions"
        )
    for p in teacher.parameters():
        p.requires_grad_(False)

    train = task.train
    if max_train_examples and len(train) > max_train_examples:
        rng = np.random.default_rng(s.seed)
        train = [train[i] for i in sorted(rng.choice(len(train), max_train_examples, replace=False))]
    train_feats = encode(task, tok, train, s.max_seq_length)
    dev_feats = encode(task, tok, task.dev, s.max_seq_length)
    pad = tok.pad_token_id

    def loss_fn(m, batch):
        labels = batch.pop("labels")
        with torch.no_grad():
            t_logits = teacher(**batch).logits.float()
        s_logits = m(**batch).logits.float()
        if task.kind == "token":
            keep = labels != -100
            s_logits, t_logits, labels = s_logits[keep], t_logits[keep], labels[keep]
        loss, soft, hard = soft_target_loss(s_logits, t_logits, labels, s.temperature, s.alpha)
        agree = (s_logits.argmax(-1) == t_logits.argmax(-1)).float().sum()
        return loss, {"soft": soft.detach(), "hard": hard.detach(), "agreement": (agree, float(len(labels)))}

    trainer, steps = s.trainer(
        model, train_feats, lambda fs: collate(fs, task.kind, pad),
        out_dir=out_dir, loss_fn=loss_fn, progress=s.progress, desc="distill",
    )  # fmt: skip
    teacher.to(trainer.device)
    t0 = time.perf_counter()
    summary = trainer.fit()
    train_s = time.perf_counter() - t0
    model.eval()
    model.save_pretrained(out_dir / "model")
    tok.save_pretrained(out_dir / "model")

    eval_settings = Settings(max_seq_length=s.max_seq_length, progress=False)
    report: dict[str, Any] = {
        "task": task.name,
        "student_spec": student,
        "settings": asdict(s),
        "steps": steps,
        "train_examples": len(train),
    }
    timed = compare_speed({"teacher": teacher, "student": model}, dev_feats, task.kind, pad)
    for name, m, path in (("teacher", teacher, Path(teacher_dir)), ("student", model, out_dir / "model")):
        metrics, _, _ = evaluate(m.cpu(), task, task.dev, dev_feats, eval_settings, pad)
        weights = path / "model.safetensors"
        report[name] = {
            "metrics": metrics,
            "main": metrics[task.main_metric],
            "parameters": num_parameters(m),
            "disk_bytes": weights.stat().st_size if weights.is_file() else None,
            "layers": m.config.num_hidden_layers,
            **timed[name],
        }
    t, st = report["teacher"], report["student"]
    report["kept"] = st["main"] / t["main"] if t["main"] else None
    report.update({k: timed[k] for k in ("speedup_batch32", "speedup_batch1")})
    report["speed_load"] = {k: timed[k] for k in ("cpu_busy_before", "load_average_before")}
    report["train_seconds"] = round(train_s, 1)
    report["final_loss"] = summary.get("loss")
    report["torch_threads"] = torch.get_num_threads()
    atomic_write_json(out_dir / "metrics.json", report)
    _card(out_dir / "model", task.kind, f"{task.name}, distilled from {teacher_dir}", teacher_dir, s,
          {"training examples": len(train), "student": student}, st["metrics"])  # fmt: skip
    return report


def _card(model_dir: Path, kind: str, task: str, teacher_dir: Any, s: Any, data: dict, metrics: dict) -> None:
    """The student's model card: what it was distilled from, on what, with which settings."""
    from .model_card import write_model_card

    write_model_card(
        model_dir, title="A student model distilled with bertkit", kind=kind, task=task, data=data,
        hyperparameters={k: v for k, v in asdict(s).items() if isinstance(v, (int, float, str, bool))},
        metrics={k: v for k, v in metrics.items() if isinstance(v, (int, float))}, base_model=str(teacher_dir),
    )  # fmt: skip


def distill_embeddings(
    teacher_dir: str | os.PathLike,
    student: str,
    texts: Sequence[str],
    out_dir: str | os.PathLike,
    settings: DistillSettings,
) -> dict[str, Any]:
    """A sentence encoder whose vectors regress the teacher's (MSE); ``OUT/model`` is a sentence-transformers
    folder. The teacher's vectors are computed once, before training."""
    from .sentence.dense import Dense
    from .sentence.encoder import SentenceEncoder
    from .train.simple import adamw_trainer, fit_and_save

    s, out_dir = settings, Path(out_dir)
    teacher = SentenceEncoder.from_pretrained(teacher_dir)
    layers, preset = parse_student(student)
    if layers:
        bert = student_from_teacher(teacher.model, layers)
    else:
        bert = student_from_preset(teacher.model, preset, s.seed)
    dense = [copy.deepcopy(d) for d in teacher.dense]
    if not dense and bert.config.hidden_size != teacher.dim:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s.seed)
            dense = [
                Dense(bert.config.hidden_size, teacher.dim, activation="torch.nn.modules.linear.Identity")
            ]
    model = SentenceEncoder(
        bert,
        teacher.tokenizer,
        teacher.pooling,
        teacher.normalize,
        s.max_seq_length,
        teacher.lowercase_input,
        dense,
    )
    texts = list(dict.fromkeys(texts))
    if len(texts) < s.batch_size:
        raise UserError(f"{len(texts)} texts are fewer than one batch (--batch-size {s.batch_size})")
    targets = torch.from_numpy(teacher.encode(texts, batch_size=64, show_progress=s.progress))
    items = list(range(len(texts)))

    def collate(idx: list[int]) -> dict[str, Any]:
        return {"x": dict(model.tokenize_batch([texts[i] for i in idx])), "y": targets[idx]}

    def loss_fn(m, batch):
        x = batch["x"]
        return F.mse_loss(m(x["input_ids"], x["attention_mask"], x.get("token_type_ids")), batch["y"])

    trainer, steps = adamw_trainer(
        model, items, s.batch_size, collate,
        epochs=s.epochs, lr=s.lr, weight_decay=s.weight_decay, warmup_ratio=s.warmup_ratio, seed=s.seed,
        out_dir=out_dir, loss_fn=loss_fn, tokens_fn=lambda b: int(b["x"]["attention_mask"].sum()),
        log_every=s.log_every, progress=s.progress, desc="distill-embed",
    )  # fmt: skip
    summary, _ = fit_and_save(trainer, model, out_dir / "model")
    got = model.encode(texts[:256])
    want = targets[:256].numpy()
    cos = (got * want).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1), 1e-12)
    report = {
        "student": student,
        "texts": len(texts),
        "steps": steps,
        "final_loss": summary.get("loss"),
        "mean_cosine_to_teacher": float(cos.mean()),
        "teacher_parameters": num_parameters(teacher.model),
        "student_parameters": num_parameters(model),
        "settings": asdict(s),
    }
    atomic_write_json(out_dir / "metrics.json", report)
    _card(out_dir / "model", "embed", f"sentence embeddings regressing {teacher_dir}'s", teacher_dir, s,
          {"texts": len(texts), "student": student}, {"mean_cosine_to_teacher": report["mean_cosine_to_teacher"]})  # fmt: skip
    return report
