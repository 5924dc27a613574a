"""Fine-tune a question-answering head on SQuAD v1.1/v2.0 and score dev officially (`bertkit finetune squad`):
BertForQuestionAnswering, or ModernBertForQuestionAnswering for a ModernBERT folder.

``run(args) -> dict`` does the work and returns the ``metrics.json`` object; ``args`` is any object with the
options as attributes (``bertkit.cli.squad`` parses them from the command line; unset ones take the
defaults below). Task code: nothing here imports the CLI.

Data: ``--train F --dev G``, or one file split by article: ``--train F --dev-articles 8`` evaluates on the
last 8 articles of F and trains on the others (``--train-articles 40`` keeps only the first 40 of those).
The shared data has only dev files, whose questions carry several answers: training uses the first one.

Training follows the paper: AdamW (weight decay 0.01, none on biases/LayerNorm), linear warm-up over 10% of
the steps then linear decay, gradient clipping 1.0, loss = mean of the start and end cross-entropies; it runs
on the generic :class:`bertkit.train.Trainer` through :func:`bertkit.tasks.training.train` (so
``--checkpoint-every N``, ``--resume`` and ``--precision bf16`` work as for the other tasks).
Defaults when the caller leaves them unset (None): max_seq_length 384, batch 32, lr 5e-5, 3 epochs for
v1.1 and 2 for v2.0 (the paper's SQuAD settings). Batches are grouped by length and padded to their longest
member only (the attention mask hides padding), so logits are scored over each window's real tokens.

Outputs under ``--out``: ``metrics.json`` (``{"task": "squad-v1.1"|"squad-v2.0", "split": "dev",
"metrics": {official names and scale}, "examples": N, ...}``), ``predictions.json``,
``nbest_predictions.json``, for v2.0 ``null_odds.json`` (the metrics are those of the official
``evaluate-v2.0.py dev.json predictions.json --na-prob-file null_odds.json``, including ``best_f1_thresh``;
``metrics.json`` also reports the scores re-decided at that threshold under ``tuned``), ``dev.json`` when
the dev set was split off (so the official script can be run on exactly the same questions), ``model/``
(HF layout + tokenizer), ``loss.png``, ``train_log.json``, and the Trainer's ``metrics.jsonl`` (one record
per step), ``curves.png`` and ``checkpoints/``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from bertkit.errors import UserError
from bertkit.io import atomic_dir, atomic_write_json
from bertkit.model_card import write_model_card
from bertkit.sentence.batching import pad
from bertkit.tasks import squad as S
from bertkit.tasks import squad_postprocess as P
from bertkit.tasks.encoding import length_batches
from bertkit.tasks.squad_metrics import evaluate

log = logging.getLogger("bertkit")

PAPER_DEFAULTS = {
    "1.1": {"epochs": 3, "lr": 5e-5, "batch_size": 32},
    "2.0": {"epochs": 2, "lr": 5e-5, "batch_size": 32},
}


# ------------------------------------------------------------------------------------------------ data


def _load(path: str, what: str) -> dict:
    try:
        return S.load_squad_json(path)
    except UserError as e:
        raise UserError(f"--{what} {e}") from None


def split_articles(
    data: dict, dev_articles: int | None, train_articles: int | None
) -> tuple[dict, dict | None]:
    """(train part, dev part): the last ``dev_articles`` articles become dev; the first ``train_articles``
    of the rest are kept for training. Either part keeps the file's version."""
    articles = data["data"]
    dev = None
    if dev_articles is not None:
        if not 0 < dev_articles < len(articles):
            raise UserError(
                f"--dev-articles {dev_articles}: the file has {len(articles)} articles; give 1..{len(articles) - 1}"
            )
        dev = {**data, "data": articles[-dev_articles:]}
        articles = articles[:-dev_articles]
    if train_articles is not None:
        if train_articles < 1:
            raise UserError(f"--train-articles {train_articles}: give at least 1")
        articles = articles[:train_articles]
    return {**data, "data": articles}, dev


# ------------------------------------------------------------------------------------------------ batching


def collate(feats: list[S.SquadFeature], pad_id: int = 0, targets: bool = True) -> dict[str, torch.Tensor]:
    """Pad to the longest window of the batch; attention mask 1 on real tokens."""
    ids, mask, types = pad([f.input_ids for f in feats], pad_id, [f.token_type_ids for f in feats])
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if targets:
        batch["start_positions"] = torch.tensor([f.start_position for f in feats], dtype=torch.long)
        batch["end_positions"] = torch.tensor([f.end_position for f in feats], dtype=torch.long)
    return batch


@torch.no_grad()
def predict_logits(
    model: torch.nn.Module,
    feats: list[S.SquadFeature],
    batch_size: int = 64,
    pad_id: int = 0,
    progress: bool = True,
) -> list[P.RawResult]:
    """Start/end logits of every window over its real tokens (batches sorted by length)."""
    model.eval()
    device = next(model.parameters()).device
    results: list[P.RawResult | None] = [None] * len(feats)
    batches = length_batches([len(f.input_ids) for f in feats], batch_size)
    for idx in tqdm(batches, desc="squad eval", unit="batch", disable=not progress, dynamic_ncols=True):
        fs = [feats[i] for i in idx]
        out = model(**{k: v.to(device) for k, v in collate(fs, pad_id, targets=False).items()})
        start = out.start_logits.float().cpu().numpy()
        end = out.end_logits.float().cpu().numpy()
        for r, i in enumerate(idx):
            n = len(feats[i].input_ids)
            results[i] = P.RawResult(feats[i].unique_id, start[r, :n], end[r, :n])
    return results  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ run


def _setting(args: Any, name: str, default: Any) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value


def _check_settings(**v: Any) -> None:
    if not 8 <= v["max_seq_length"] <= 512:
        raise UserError(f"--max-seq-length {v['max_seq_length']}: use 8..512 (SQuAD default 384)")
    for name in (
        "epochs",
        "batch_size",
        "lr",
        "doc_stride",
        "max_query_length",
        "n_best_size",
        "max_answer_length",
    ):
        if v[name] <= 0:
            raise UserError(f"--{name.replace('_', '-')} {v[name]}: must be positive")
    window = v["max_seq_length"] - min(v["max_query_length"], v["max_seq_length"]) - 3
    if window < 1:
        raise UserError(
            f"--max-seq-length {v['max_seq_length']} leaves no room for the context after "
            f"--max-query-length {v['max_query_length']} and 3 special tokens"
        )
    if v["doc_stride"] > window:  # not an error: like run_squad.py the step is capped at the window's length
        logging.getLogger("bertkit").warning(
            "--doc-stride %d is larger than the context window of %d tokens left by a %d-token question "
            "(--max-seq-length - --max-query-length - 3): such windows will follow each other without overlap",
            v["doc_stride"], window, v["max_query_length"],
        )  # fmt: skip
    if not 0 <= v["warmup_ratio"] < 1:
        raise UserError(f"--warmup-ratio {v['warmup_ratio']}: use a fraction in [0, 1)")


def run(args: Any) -> dict:
    """Fine-tune and evaluate; writes everything under ``args.out`` and returns the metrics.json dict."""
    from bertkit.architectures import display_name, head_class
    from bertkit.tasks.outputs import plot_losses
    from bertkit.tasks.spec import Settings
    from bertkit.tasks.training import read_best, train
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.distributed import init_distributed

    version = str(_setting(args, "version", "1.1"))
    v2 = version == "2.0"
    paper = PAPER_DEFAULTS[version]
    max_seq_length = int(_setting(args, "max_seq_length", 384))
    epochs = float(_setting(args, "epochs", paper["epochs"]))
    batch_size = int(_setting(args, "batch_size", paper["batch_size"]))
    lr = float(_setting(args, "lr", paper["lr"]))
    seed = int(_setting(args, "seed", 42))
    doc_stride = int(_setting(args, "doc_stride", 128))
    max_query_length = int(_setting(args, "max_query_length", 64))
    n_best_size = int(_setting(args, "n_best_size", 20))
    max_answer_length = int(_setting(args, "max_answer_length", 30))
    threshold = float(_setting(args, "null_score_diff_threshold", 0.0))
    weight_decay = float(_setting(args, "weight_decay", 0.01))
    warmup_ratio = float(_setting(args, "warmup_ratio", 0.1))
    progress = not getattr(args, "quiet", False)
    checkpoint_every = int(_setting(args, "checkpoint_every", 0))
    precision = str(_setting(args, "precision", "fp32"))
    eval_batch_size = int(_setting(args, "eval_batch_size", 64))
    _check_settings(
        max_seq_length=max_seq_length, epochs=epochs, batch_size=batch_size, lr=lr, doc_stride=doc_stride,
        max_query_length=max_query_length, n_best_size=n_best_size, max_answer_length=max_answer_length,
        warmup_ratio=warmup_ratio,
    )  # fmt: skip
    out = Path(args.out)
    model_dir = Path(args.model)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"--model {model_dir}: no config.json there; pass a model directory in the HF layout")
    if getattr(args, "dev", None) is None and getattr(args, "dev_articles", None) is None:
        raise UserError("give --dev FILE, or --dev-articles N to evaluate on the last N articles of --train")

    t0 = time.time()
    train_data, dev_data = split_articles(
        _load(args.train, "train"),
        None if getattr(args, "dev", None) else args.dev_articles,
        getattr(args, "train_articles", None),
    )
    dev_name = str(args.train)  # --dev-articles: the dev articles are --train's last ones
    if dev_data is None:
        dev_data, dev_name = _load(args.dev, "dev"), str(args.dev)
    tok = Tokenizer.from_pretrained(model_dir)
    lowercase = bool(getattr(tok, "lowercase", True))
    train_ex, train_stats = S.read_squad_examples(
        train_data, is_training=True, version_2_with_negative=v2, name=str(args.train)
    )
    dev_ex, _ = S.read_squad_examples(dev_data, is_training=False, version_2_with_negative=v2, name=dev_name)
    if not train_ex:
        raise UserError(f"--train {args.train}: no usable training questions")
    if not dev_ex:
        raise UserError("the dev set has no questions")
    common = dict(max_seq_length=max_seq_length, doc_stride=doc_stride, max_query_length=max_query_length)
    train_feats = S.convert_examples_to_features(train_ex, tok, is_training=True, progress=progress, **common)
    dev_feats = S.convert_examples_to_features(dev_ex, tok, is_training=False, progress=progress, **common)
    encode_s = time.time() - t0

    rank = init_distributed()[0]
    torch.manual_seed(seed)  # qa_outputs is initialised from torch's default generator
    model = head_class("qa", model_dir).from_pretrained(model_dir)  # BERT's or ModernBERT's, by the folder
    settings = Settings(
        epochs=epochs, batch_size=batch_size, lr=lr, max_seq_length=max_seq_length, seed=seed,
        warmup_ratio=warmup_ratio, weight_decay=weight_decay, progress=progress,
        freeze_encoder=bool(getattr(args, "freeze_encoder", False)),
        checkpoint_every=checkpoint_every, resume=bool(getattr(args, "resume", False)), precision=precision,
        gradient_checkpointing=bool(getattr(args, "gradient_checkpointing", False)),
        grad_accum=int(_setting(args, "grad_accum", 1)), max_steps=getattr(args, "max_steps", None),
        eval_every=int(_setting(args, "eval_every", 0)), keep_best=bool(getattr(args, "keep_best", False)),
        distributed=str(_setting(args, "distributed", "ddp")),
    )  # fmt: skip
    pad_id = tok.pad_token_id

    def collate_fn(fs: list[S.SquadFeature]) -> dict[str, torch.Tensor]:
        return collate(fs, pad_id)

    def decode(m, with_progress: bool):
        results = predict_logits(m, dev_feats, eval_batch_size, pad_id, with_progress)
        return P.compute_predictions(
            dev_ex, dev_feats, results, n_best_size=n_best_size, max_answer_length=max_answer_length,
            lowercase=lowercase, version_2_with_negative=v2, null_score_diff_threshold=threshold,
        )  # fmt: skip

    def eval_fn(m) -> dict:  # during training: the official scores of the dev predictions
        preds = decode(m, False)
        return evaluate(
            dev_data, preds.predictions, version=version, na_probs=preds.null_odds if v2 else None
        )

    t1 = time.time()
    # loss = mean of the start and end cross-entropies (the head's); the Trainer uses a GPU when there is one
    losses = train(
        model, train_feats, collate_fn, settings, out, lengths=[len(f.input_ids) for f in train_feats],
        desc="squad train", eval_fn=eval_fn, main_metric="f1",
    )  # fmt: skip
    t2 = time.time()
    preds = decode(model, progress)
    metrics = evaluate(dev_data, preds.predictions, version=version, na_probs=preds.null_odds if v2 else None)
    eval_s = time.time() - t2

    dev_source = getattr(args, "dev", None) or f"last {args.dev_articles} articles of {args.train}"
    hyperparameters = {
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "max_seq_length": max_seq_length,
        "doc_stride": doc_stride,
        "max_query_length": max_query_length,
        "n_best_size": n_best_size,
        "max_answer_length": max_answer_length,
        "weight_decay": weight_decay,
        "warmup_ratio": warmup_ratio,
        "grad_accum": settings.grad_accum,
        "max_steps": settings.max_steps,
        "precision": precision,
    }
    if rank == 0:  # under torchrun rank 0 writes the outputs
        out.mkdir(parents=True, exist_ok=True)
        P.write_predictions(preds, out, v2)
        if getattr(args, "dev", None) is None:
            atomic_write_json(out / "dev.json", dev_data)
        model.to("cpu")
        with atomic_dir(out / "model") as tmp:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            write_model_card(
                tmp, title=f"SQuAD v{version}: a fine-tuned {display_name(model_dir)}", kind="qa", task=f"squad-v{version}",
                data={"train": args.train, "train questions": len(train_ex), "dev": dev_source,
                      "dev questions": len(dev_ex)},
                hyperparameters={k: hyperparameters[k] for k in ("epochs", "batch_size", "lr", "seed",
                                 "max_seq_length", "doc_stride", "grad_accum", "precision")},
                metrics=metrics, base_model=str(model_dir),
            )  # fmt: skip
        plot_losses(
            losses, out / "loss.png", f"SQuAD v{version}: lr {lr:g}, batch {batch_size}, {epochs:g} epochs"
        )
        atomic_write_json(out / "train_log.json", {"losses": losses})

    k = max(1, min(20, len(losses) // 4))  # mean over the first/last k steps
    result: dict[str, Any] = {
        "task": f"squad-v{version}",
        "split": "dev",
        "metrics": metrics,
        "examples": len(dev_ex),
        "train_examples": len(train_ex),
        "train_skipped": train_stats.skipped,
        "train_features": len(train_feats),
        "dev_features": len(dev_feats),
        "data": {
            "train": str(args.train),
            "dev": str(dev_source),
            "train_articles": len(train_data["data"]),
            "dev_articles": len(dev_data["data"]),
        },
        "hyperparameters": hyperparameters,
        "steps": len(losses),
        "first_loss": sum(losses[:k]) / k,
        "final_loss": sum(losses[-k:]) / k,
        "seconds": {"encode": round(encode_s, 2), "train": round(t2 - t1, 2), "eval": round(eval_s, 2)},
        "model_dir": str(out / "model"),
    }
    if settings.keep_best:
        result["best"] = read_best(out)
    if v2:
        # The search must see every question's best non-null answer: on predictions.json (as the official
        # script is run) a question already decided "" can never be switched back, so when the null score
        # wins everywhere at the default threshold the official best_f1 is just the all-null score.
        search = evaluate(dev_data, preds.best_non_null, version="2.0", na_probs=preds.null_odds)
        best = search["best_f1_thresh"]
        tuned = evaluate(dev_data, P.apply_threshold(preds, best), version="2.0")
        result["null_score_diff_threshold"] = threshold
        result["tuned"] = {
            "null_score_diff_threshold": best,
            "metrics": tuned,
            "note": "threshold searched on this dev set over each question's best non-null answer and "
            "null_odds.json; re-run with --null-score-diff-threshold to apply it to new data",
        }
    if rank == 0:
        atomic_write_json(out / "metrics.json", result)
    log.info("SQuAD v%s dev: %s", version, json.dumps({k: metrics[k] for k in ("exact", "f1")}))
    return result
