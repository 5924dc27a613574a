"""``bertkit train-embed``, ``train-rerank``, ``evaluate retrieval|sts`` and ``retrieval-data squad``."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import args as A


def _training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train", type=A.existing_file, required=True, metavar="F", help="pairs (.jsonl; .tsv)")
    p.add_argument("--model", type=A.existing_dir, required=True, metavar="DIR", help="starting model")
    A.add_output(p, "--out", kind="dir", type=Path, metavar="DIR")
    p.add_argument(
        "--corpus",
        type=A.existing_file,
        default=None,
        metavar="F",
        help="corpus .jsonl ({id, text}) for negatives",
    )
    p.add_argument("--epochs", type=A.positive_float, default=1.0, help="passes over the pairs (default 1)")
    p.add_argument(
        "--batch-size",
        type=A.positive_int,
        default=32,
        help="pairs per step; in-batch negatives (default 32)",
    )
    p.add_argument("--lr", type=A.positive_float, default=2e-5, help="peak learning rate (default 2e-5)")
    p.add_argument(
        "--warmup-ratio", type=A.probability, default=0.1, help="fraction of steps of warm-up (default 0.1)"
    )
    p.add_argument("--seed", type=int, default=0, help="shuffling and initialisation (default 0)")
    A.add_training_precision(p)
    p.add_argument("--max-pairs", type=A.positive_int, default=None, help="use a seeded sample of the pairs")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train-embed",
        help="train a sentence encoder (bi-encoder): MNRL, cosine or CoSENT",
        description="Train a bi-encoder; OUT/model is a sentence-transformers folder. Pairs: "
        '{"query", "positive"[, "negatives"]} for mnrl, {"sentence1", "sentence2", "score"} for cosine/cosent.',
    )
    _training_args(p)
    p.add_argument("--loss", choices=("mnrl", "cosine", "cosent"), default="mnrl")
    p.add_argument("--symmetric", action="store_true", help="mnrl: also passage -> query")
    p.add_argument("--scale", type=A.positive_float, default=20.0, help="mnrl/cosent: similarity scale")
    p.add_argument(
        "--hard-negatives",
        type=A.non_negative_int,
        default=0,
        metavar="N",
        help="mine N negatives per query with the starting model",
    )
    p.add_argument("--pooling", choices=("mean", "cls", "max"), default=None, help="default: the model's")
    p.add_argument("--dense-dim", type=A.positive_int, default=None, help="add a Dense layer to this size")
    p.add_argument("--normalize", choices=("yes", "no"), default=None, help="default: the model's")
    p.add_argument("--max-seq-length", type=A.positive_int, default=None)
    p.set_defaults(func=train_embed_cmd)

    p = subparsers.add_parser(
        "train-rerank",
        help="train a cross-encoder re-ranker on (query, passage, label)",
        description="Train a cross-encoder; OUT/model loads in bertkit's and sentence-transformers' CrossEncoder.",
    )
    _training_args(p)
    p.add_argument("--negatives", type=A.non_negative_int, default=3, help="sampled negatives per query")
    p.add_argument("--hard-negatives", type=A.non_negative_int, default=0, help="mined negatives per query")
    p.add_argument(
        "--hard-negatives-model", type=Path, default=None, metavar="DIR", help="bi-encoder to mine with"
    )
    p.add_argument("--max-length", type=A.positive_int, default=256)
    p.set_defaults(func=train_rerank_cmd)

    p = subparsers.add_parser("evaluate", help="evaluate retrieval (recall, MRR, nDCG) or STS (Spearman)")
    sub = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    r = sub.add_parser("retrieval", help="recall@1/5/10, MRR@10, nDCG@10 over a corpus")
    r.add_argument("--model", type=A.existing_dir, required=True, metavar="DIR", help="bi-encoder")
    r.add_argument(
        "--queries", type=Path, required=True, metavar="F", help='.jsonl {"id", "text", "relevant"}'
    )
    r.add_argument("--corpus", type=A.existing_file, required=True, metavar="F", help='.jsonl {"id", "text"}')
    r.add_argument(
        "--rerank", type=Path, default=None, metavar="DIR", help="cross-encoder for the top --rerank-top"
    )
    r.add_argument("--rerank-top", type=A.positive_int, default=50)
    r.add_argument(
        "--rerank-max-length",
        type=A.positive_int,
        default=256,
        help="cross-encoder tokens per (query, passage); use its training --max-length",
    )
    r.add_argument(
        "--rerank-queries", type=A.positive_int, default=None, help="re-rank only the first N queries"
    )
    r.add_argument("--max-queries", type=A.positive_int, default=None, help="evaluate a seeded sample")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--batch-size", type=A.positive_int, default=64)
    r.add_argument("--max-seq-length", type=A.positive_int, default=None, help="default: the model's")
    r.set_defaults(func=evaluate_retrieval_cmd)
    s = sub.add_parser("sts", help="Spearman of cosine similarity vs gold scores")
    s.add_argument("--model", type=A.existing_dir, required=True, metavar="DIR")
    s.add_argument(
        "--data", type=A.existing_file, required=True, metavar="F", help="STS-B .tsv or scored-pairs .jsonl"
    )
    s.add_argument("--batch-size", type=A.positive_int, default=64)
    s.set_defaults(func=evaluate_sts_cmd)

    p = subparsers.add_parser("retrieval-data", help="make retrieval files from a public dataset")
    sub = p.add_subparsers(dest="source", metavar="SOURCE", required=True)
    q = sub.add_parser("squad", help="SQuAD v1.1 split by article: train.jsonl, queries.jsonl, corpus.jsonl")
    q.add_argument("--input", type=A.existing_file, required=True, metavar="F")
    A.add_output(q, "--out", kind="dir", type=Path, metavar="DIR")
    q.add_argument("--train-articles", type=A.positive_int, default=40)
    q.add_argument("--eval-articles", type=A.positive_int, default=8)
    q.set_defaults(func=squad_data_cmd)


def _sample(items: list, n: int | None, seed: int) -> list:
    if n is None or n >= len(items):
        return items
    idx = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in idx]


def train_embed_cmd(args: argparse.Namespace) -> dict[str, Any]:
    from ..sentence.data import read_corpus, read_pairs
    from ..sentence.encoder import SentenceEncoder
    from ..sentence.train_embed import EmbedSettings, train_embed

    pairs = _sample(read_pairs(args.train), args.max_pairs, args.seed)
    corpus = read_corpus(args.corpus)[1] if args.corpus else None
    model = SentenceEncoder.from_pretrained(
        args.model,
        pooling=args.pooling,
        dense_dim=args.dense_dim,
        normalize=None if args.normalize is None else args.normalize == "yes",
        max_seq_length=args.max_seq_length,
        seed=args.seed,
    )
    settings = EmbedSettings.from_args(args)
    return train_embed(model, pairs, args.out, settings, corpus=corpus)


def train_rerank_cmd(args: argparse.Namespace) -> dict[str, Any]:
    from ..sentence.data import read_corpus, read_pairs
    from ..sentence.train_rerank import RerankSettings, build_triples, train_rerank

    all_pairs = read_pairs(args.train)
    pairs = _sample(all_pairs, args.max_pairs, args.seed)
    # Negatives come from every training passage, not only the sampled pairs' own: a sample of 256 pairs
    # would leave hard-negative mining a pool of 256 passages.
    corpus = read_corpus(args.corpus)[1] if args.corpus else [p.positive for p in all_pairs]
    settings = RerankSettings.from_args(args)
    hard = None
    if args.hard_negatives_model is not None:
        from ..io import resolve_model_dir
        from ..sentence.encoder import SentenceEncoder

        hard = SentenceEncoder.from_pretrained(resolve_model_dir(args.hard_negatives_model))
    triples = build_triples(pairs, corpus, settings, random.Random(args.seed), hard_model=hard)
    return train_rerank(args.model, triples, args.out, settings)


def evaluate_retrieval_cmd(args: argparse.Namespace) -> dict[str, Any]:
    from ..retrieval.evaluate import evaluate_retrieval
    from ..sentence.cross_encoder import CrossEncoder
    from ..sentence.data import read_corpus, read_queries
    from ..sentence.encoder import SentenceEncoder

    texts, relevant = read_queries(args.queries)
    keep = _sample(list(range(len(texts))), args.max_queries, args.seed)
    texts, relevant = [texts[i] for i in keep], [relevant[i] for i in keep]
    ids, corpus = read_corpus(args.corpus)
    enc = SentenceEncoder.from_pretrained(args.model, max_seq_length=args.max_seq_length)
    from ..io import resolve_model_dir

    reranker = (
        CrossEncoder.from_pretrained(resolve_model_dir(args.rerank), max_length=args.rerank_max_length)
        if args.rerank
        else None
    )
    out = evaluate_retrieval(
        enc, texts, relevant, ids, corpus, reranker, args.rerank_top, args.batch_size, args.rerank_queries
    )
    return {"model": str(args.model), "rerank": str(args.rerank) if args.rerank else None, **out}


def evaluate_sts_cmd(args: argparse.Namespace) -> dict[str, Any]:
    from ..retrieval.sts import evaluate_sts
    from ..sentence.data import read_pairs
    from ..sentence.encoder import SentenceEncoder

    pairs = read_pairs(args.data)
    if any(p.score is None for p in pairs):
        raise UserError(f"{args.data}: STS evaluation needs scored pairs (sentence1, sentence2, score)")
    enc = SentenceEncoder.from_pretrained(args.model)
    return {
        "model": str(args.model),
        "data": str(args.data),
        **evaluate_sts(enc, [(p.query, p.positive, p.score) for p in pairs], args.batch_size),
    }


def squad_data_cmd(args: argparse.Namespace) -> dict[str, Any]:
    from ..sentence.data import squad_split, write_jsonl

    train, queries, corpus = squad_split(args.input, args.train_articles, args.eval_articles)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "train.jsonl", train)
    write_jsonl(args.out / "queries.jsonl", queries)
    write_jsonl(args.out / "corpus.jsonl", corpus)
    return {"out": str(args.out), "train_pairs": len(train), "queries": len(queries), "corpus": len(corpus)}
