"""Bi-encoder training: ``bertkit train-embed`` vs sentence-transformers' own trainer, side by side.

    .venv/bin/python -m benchmarks.bench_embed_train [--quick] [--threads 2] [--pairs 512] [--seed 0] [--out F.json]

Same data (a seeded sample of SQuAD v1.1 dev questions with their paragraphs from the first 40 articles),
same model (all-MiniLM-L6-v2), same loss (MultipleNegativesRankingLoss, scale 20), batch size 32, one epoch,
learning rate 2e-5 with 10% linear warm-up, seed 0 (``--seed``: both sides'), 128 tokens. Reported: training
pairs/s of each (the ratio is ours / theirs) and the quality of each trained model on the 8 held-out articles'
questions against those articles' paragraphs (recall@1, MRR@10), both encoded at the 128 tokens they trained
on, which should agree within noise. Three rows: fp32 against fp32; each side's mixed precision
(``--precision auto`` against the reference's ``bf16=True``); and what each user gets without tuning the
reference: our ``--precision auto`` run against its default fp32 run (the same two runs as the rows above,
paired differently, as the pre-training bench's "auto vs fp32" row).

Timed on both sides: the training loop (batching, tokenising, forward, backward, optimizer), the same
work: theirs ``trainer.train()``, ours ``Trainer.fit`` with the end-of-run curves PNG off (``plot=False``;
matplotlib's import and drawing take about 1.5 s, work the reference does not do). Saving the model is
outside both spans.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .inputs import SHARED_DATA, STAND_IN, NoData, minilm_dir, minilm_weights

SQUAD = SHARED_DATA / "squad" / "dev-v1.1.json"
# what the reference side needs beside sentence-transformers itself (its trainer takes a datasets.Dataset)
REFERENCE_PACKAGES = ("sentence_transformers", "datasets")


def _quality(encoder: Any, queries: list[dict], corpus: list[dict], start: Any = None) -> dict[str, float]:
    """recall@1, MRR@10, nDCG@10 of ``encoder``; with ``start`` (the untrained encoder) also the largest
    change of any weight in training, so a reader sees the models differ even where the metrics tie."""
    import json

    from bertkit.retrieval.evaluate import evaluate_retrieval

    rel = [{json.dumps(r, sort_keys=True) for r in q["relevant"]} for q in queries]
    out = evaluate_retrieval(
        encoder, [q["text"] for q in queries], rel, [c["id"] for c in corpus], [c["text"] for c in corpus]
    )
    res = {k: round(out["bi_encoder"][k], 2) for k in ("recall@1", "mrr@10", "ndcg@10")}
    if start is not None:
        before = start.model.state_dict()
        res["max_weight_change"] = float(
            max((v.float() - before[k].float()).abs().max() for k, v in encoder.model.state_dict().items())
        )
    return res


def sampled_split(n_pairs: int, n_queries: int) -> tuple[list[dict], list[dict], list[dict]]:
    """The bench's data (and ``benchmarks.work_ceiling``'s): ``n_pairs`` SQuAD training pairs and ``n_queries``
    held-out questions sampled with seed 0, and the paragraphs of those questions' articles as the corpus."""
    from bertkit.sentence.data import squad_split

    if not SQUAD.is_file():
        raise NoData(f"{SQUAD} not found")
    train, queries, corpus = squad_split(SQUAD)
    rng = random.Random(0)
    train = rng.sample(train, n_pairs)
    queries = rng.sample(queries, n_queries)
    eval_articles = {r.split("-")[0] for q in queries for r in q["relevant"]}
    return train, queries, [c for c in corpus if c["id"].split("-")[0] in eval_articles]


def run(args: Any) -> Iterator[dict[str, Any]]:
    """The rows, each as soon as both of its runs are done (the fp32 row after the first pair of trainings), so
    a run stopped by a time limit keeps what it finished. A skipped row when the reference cannot run here."""
    import torch

    if not SQUAD.is_file():
        raise NoData(f"{SQUAD} not found")
    missing = []
    for module in REFERENCE_PACKAGES:
        try:
            importlib.import_module(module)
        except Exception as e:  # absent, or present but broken (an older dependency): no reference here
            missing.append(f"{module} ({type(e).__name__}: {str(e)[:200]})")
    if missing:
        yield {
            "name": "train-embed MNRL MiniLM vs sentence-transformers",
            "suite": "embed_train",
            "skipped": f"the reference cannot run here: {'; '.join(missing)}",
        }
        return
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses

    try:
        from sentence_transformers.sentence_transformer.training_args import (
            SentenceTransformerTrainingArguments,
        )
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.training_args import SentenceTransformerTrainingArguments

    from bertkit.sentence.data import Pair
    from bertkit.sentence.encoder import SentenceEncoder
    from bertkit.sentence.train_embed import EmbedSettings, train_embed

    quick = bool(getattr(args, "quick", False))
    n = int(getattr(args, "pairs", None) or (64 if quick else 512))
    n_queries = 50 if quick else 200
    seq, batch = 128, 32
    seed = int(getattr(args, "seed", 0) or 0)  # both trainers' seed; the sampled pairs stay seed 0's
    minilm = minilm_dir()
    weights = minilm_weights(minilm)
    # random weights train as fast as the real ones, but what they retrieve means nothing: no quality then
    quality_skipped = f"not measured: MiniLM weights are {weights}" if weights == STAND_IN else None
    train, queries, corpus = sampled_split(n, n_queries)
    pairs = [Pair(t["query"], t["positive"]) for t in train]
    steps = n // batch

    def train_ours(tmp: Path, precision: str) -> tuple[float, dict, str]:
        s = EmbedSettings(
            loss="mnrl", epochs=1, batch_size=batch, lr=2e-5, warmup_ratio=0.1, seed=seed, precision=precision
        )
        if precision == "auto":
            # "auto" measures fp32 against bf16 once per machine and batch shape, at the first batch (about
            # eight steps' worth), then reads its cache. An untimed one-step run on the same first batch makes
            # that one-off measurement here, as the pre-training bench's warm-up steps do: the timed run is
            # what every later run on this machine costs.
            warm = dataclasses.replace(s, epochs=1 / steps)
            train_embed(
                SentenceEncoder.from_pretrained(minilm, max_seq_length=seq),
                pairs,
                tmp / "warm",
                warm,
                progress=False,
            )
        torch.manual_seed(seed)
        ours = SentenceEncoder.from_pretrained(minilm, max_seq_length=seq)
        summary = train_embed(ours, pairs, tmp / "ours", s, progress=False, plot=False)
        took = summary["train_seconds"]  # Trainer.fit: the training loop alone, as the reference's span
        if quality_skipped:
            return took, {"skipped": quality_skipped}, summary["precision"]
        quality = _quality(
            SentenceEncoder.from_pretrained(tmp / "ours" / "model", max_seq_length=seq),
            queries,
            corpus,
            untrained,
        )
        return took, quality, summary["precision"]

    def train_reference(tmp: Path, bf16: bool) -> tuple[float, dict]:
        from datasets import Dataset

        torch.manual_seed(seed)
        ref = SentenceTransformer(str(minilm), device="cpu")
        ref.max_seq_length = seq
        data = Dataset.from_dict(
            {"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
        )
        targs = SentenceTransformerTrainingArguments(
            output_dir=str(tmp / "st"),
            num_train_epochs=1,
            per_device_train_batch_size=batch,
            learning_rate=2e-5,
            warmup_ratio=0.1,
            seed=seed,
            report_to=[],
            save_strategy="no",
            logging_steps=10,
            dataloader_drop_last=True,
            use_cpu=True,
            disable_tqdm=True,
            bf16=bf16,
        )
        trainer = SentenceTransformerTrainer(
            model=ref,
            args=targs,
            train_dataset=data,
            loss=losses.MultipleNegativesRankingLoss(ref, scale=20.0),
        )
        t0 = time.perf_counter()
        trainer.train()
        took = time.perf_counter() - t0
        if quality_skipped:
            return took, {"skipped": quality_skipped}
        ref.save(str(tmp / "st-model"))
        # the length given, not read from the folder: both sides are evaluated at the 128 tokens they trained on
        trained = SentenceEncoder.from_pretrained(tmp / "st-model", max_seq_length=seq)
        return took, _quality(trained, queries, corpus, untrained)

    untrained = None if quality_skipped else SentenceEncoder.from_pretrained(minilm, max_seq_length=seq)
    untrained_q = {"skipped": quality_skipped} if quality_skipped else _quality(untrained, queries, corpus)
    runs = {}
    # fp32 against fp32; then each side's mixed precision: ours "auto" (bf16 autocast where it measured
    # faster on this CPU and the loss agreed) against sentence-transformers with bf16=True (its autocast).
    # Each row once both of its runs are done: the third pairs the second's "auto" with the first's fp32.
    plan = {
        ("fp32", False): [("fp32", False, "")],
        ("auto", True): [
            ("auto", True, ", ours auto ({}) vs theirs bf16"),
            ("auto", False, ", ours auto ({}) vs theirs default fp32"),
        ],
    }
    for (precision, bf16), labels in plan.items():
        with tempfile.TemporaryDirectory() as tmp:
            runs["ours", precision] = train_ours(Path(tmp), precision)
        with tempfile.TemporaryDirectory() as tmp:
            runs["ref", bf16] = train_reference(Path(tmp), bf16)
        for ours_precision, ref_bf16, label in labels:
            ours_s, ours_q, resolved = runs["ours", ours_precision]
            ref_s, ref_q = runs["ref", ref_bf16]
            ours_ps, ref_ps = steps * batch / ours_s, steps * batch / ref_s
            row = {
                "name": f"train-embed MNRL MiniLM {n} pairs{label.format(resolved)}",
                "suite": "embed_train",
                "unit": "pairs/s",
                "ours": round(ours_ps, 2),
                "reference": round(ref_ps, 2),
                "ratio": ours_ps / ref_ps,
                "goal": 2.0,
                "note": "reference = sentence-transformers SentenceTransformerTrainer, same data/model/loss/"
                "batch/epochs/seed/lr/warm-up/length; timed: the training loop on both sides",
                "precision_ours": resolved,
                "precision_reference": "bf16" if ref_bf16 else "fp32",
                "quality_ours": ours_q,
                "quality_reference": ref_q,
                "quality_untrained": untrained_q,
                "eval_queries": len(queries),
                "eval_corpus": len(corpus),
                "steps": steps,
                "seed": seed,
                "minilm_weights": weights,
            }
            if quality_skipped:
                row["quality_comparable"] = False
            yield row


def main(argv: list[str] | None = None) -> None:
    from .common import environment, pin_threads

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pairs", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="both trainers' seed (the sampled pairs stay fixed)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    pin_threads(args.threads)
    rows = []
    for r in run(args):  # each as soon as it is measured
        print(r, flush=True)
        rows.append(r)
    if args.out:
        from bertkit.io import atomic_write_json

        atomic_write_json(
            args.out,
            {
                "environment": environment(),
                "command": "python -m benchmarks.bench_embed_train " + " ".join(argv or []),
                "results": rows,
            },
        )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
