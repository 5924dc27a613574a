"""The reference for `bertkit train-rerank`: sentence-transformers' own ``CrossEncoder.fit`` on the same triples
(built by the same ``build_triples`` call from the same file, sample, seed and mining model) with the same
settings (batch size, epochs, learning rate, linear warm-up ratio, weight decay, clipping at 1, max length,
binary cross-entropy on one logit). The saved folder is evaluated by the same `bertkit evaluate retrieval
--rerank` command as bertkit's (experiments/retrieval/squad.sh, stage st-rerank).

    python experiments/retrieval/st_rerank.py --train TRAIN.jsonl --model DIR --out DIR --negatives 1 \
        --hard-negatives 1 --hard-negatives-model DIR --batch-size 32 --lr 2e-5 --max-length 128   (squad.sh's)

Prints a JSON summary (and writes OUT/train_log.json). A bench script: sentence-transformers is a test/bench
dependency, never a runtime one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--max-pairs", type=int, default=None)
    p.add_argument("--negatives", type=int, default=3)
    p.add_argument("--hard-negatives", type=int, default=0)
    p.add_argument("--hard-negatives-model", default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    from sentence_transformers import CrossEncoder, InputExample
    from torch.utils.data import DataLoader

    from bertkit.cli.retrieval import _sample
    from bertkit.io import resolve_model_dir
    from bertkit.sentence.data import read_pairs
    from bertkit.sentence.encoder import SentenceEncoder
    from bertkit.sentence.train_rerank import RerankSettings, build_triples

    # exactly the CLI's triples: same sample, same negative pool (every training passage), same rng
    all_pairs = read_pairs(a.train)
    pairs = _sample(all_pairs, a.max_pairs, a.seed)
    settings = RerankSettings(
        negatives=a.negatives,
        hard_negatives=a.hard_negatives,
        batch_size=a.batch_size,
        max_length=a.max_length,
    )
    hard = (
        SentenceEncoder.from_pretrained(resolve_model_dir(a.hard_negatives_model))
        if a.hard_negatives_model
        else None
    )
    triples = build_triples(
        pairs, [q.positive for q in all_pairs], settings, random.Random(a.seed), hard_model=hard
    )

    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    os.chdir(a.out)  # CrossEncoder.fit makes a checkpoints/ folder in the working directory
    torch.manual_seed(a.seed)
    model = CrossEncoder(a.model, num_labels=1, max_length=a.max_length, device="cpu")
    examples = [InputExample(texts=[q, d], label=y) for q, d, y in triples]
    loader = DataLoader(examples, batch_size=a.batch_size, shuffle=True)
    steps = len(examples) // a.batch_size * a.epochs
    t0 = time.perf_counter()
    model.fit(
        train_dataloader=loader,
        epochs=a.epochs,
        warmup_steps=int(a.warmup_ratio * steps),
        optimizer_params={"lr": a.lr},
        weight_decay=0.01,
        max_grad_norm=1.0,
        show_progress_bar=True,
    )
    seconds = time.perf_counter() - t0
    model.save_pretrained(str(a.out / "model"))
    result = {
        "trainer": "sentence-transformers CrossEncoder.fit",
        "steps": steps,
        "triples": len(triples),
        "positives": sum(1 for t in triples if t[2] > 0.5),
        "train_seconds": round(seconds, 2),
        "pairs_per_second": round(steps * a.batch_size / seconds, 2) if seconds > 0 else None,
        "settings": {k: v for k, v in vars(a).items() if k != "out"},
        "model": str(a.out / "model"),
    }
    (a.out / "train_log.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
