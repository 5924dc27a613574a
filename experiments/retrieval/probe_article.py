"""A cheap re-ranker diagnostic on the SQuAD split of squad.sh: for N seeded evaluation questions, the
candidates are the question's paragraph plus up to 19 other paragraphs of the SAME article (what a good
bi-encoder's top 50 mostly holds); MRR@10 and recall@1 of the bi-encoder and of the cross-encoder on exactly
those candidates. A random order scores MRR@10 14.6 on 20 candidates
(the sum of 1/r for r = 1..10, over 20).

    python experiments/retrieval/probe_article.py --data OUT/data --bi-encoder OUT/embed --rerank OUT/rerank \
        [--queries 30] [--max-length 128] > probe.json
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

import numpy as np


def _mrr_and_hit(scores: np.ndarray) -> tuple[float, int]:
    """Candidate 0 is the relevant one: (reciprocal rank if within 10 else 0, 1 if ranked first)."""
    rank = int(np.sum(scores > scores[0])) + 1  # ties count in the candidate's favour
    return (1.0 / rank if rank <= 10 else 0.0), int(rank == 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="squad.sh OUT/data")
    p.add_argument("--bi-encoder", type=Path, required=True)
    p.add_argument("--rerank", type=Path, required=True)
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--candidates", type=int, default=20)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    from bertkit.io import resolve_model_dir
    from bertkit.sentence.cross_encoder import CrossEncoder
    from bertkit.sentence.encoder import SentenceEncoder

    texts, by_article = {}, defaultdict(list)
    for line in (a.data / "corpus.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        texts[r["id"]] = r["text"]
        by_article[r["id"].split("-")[0]].append(r["id"])
    queries = [json.loads(line) for line in (a.data / "queries.jsonl").open(encoding="utf-8")]
    rng = random.Random(a.seed)
    sample = rng.sample(queries, a.queries)
    enc = SentenceEncoder.from_pretrained(resolve_model_dir(a.bi_encoder), max_seq_length=a.max_length)
    ce = CrossEncoder.from_pretrained(resolve_model_dir(a.rerank), max_length=a.max_length)
    totals = {"bi_encoder": [0.0, 0], "cross_encoder": [0.0, 0]}
    for q in sample:
        pid = q["relevant"][0]
        others = [i for i in by_article[pid.split("-")[0]] if i != pid]
        cand = [texts[pid]] + [texts[i] for i in rng.sample(others, min(a.candidates - 1, len(others)))]
        e = enc.encode(cand + [q["text"]])
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        for name, scores in (
            ("bi_encoder", e[:-1] @ e[-1]),
            ("cross_encoder", ce.predict([(q["text"], t) for t in cand])),
        ):
            mrr, hit = _mrr_and_hit(np.asarray(scores))
            totals[name][0] += mrr
            totals[name][1] += hit
    out = {
        "command": "experiments/retrieval/probe_article.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()),
        "queries": a.queries,
        "candidates": a.candidates,
    }
    for name, (mrr, hits) in totals.items():
        out[name] = {"mrr@10": round(100 * mrr / a.queries, 2), "recall@1": round(100 * hits / a.queries, 2)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
