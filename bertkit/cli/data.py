"""``bertkit vocab`` and ``bertkit prepare``: corpus -> WordPiece vocabulary or byte-level BPE tokenizer -> token
shards (-> static instances)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli import args as A
from bertkit.data.corpus import FORMATS, describe_files, expand_paths
from bertkit.errors import UserError


def _prepare_started(path: Path) -> bool:
    # what an interrupted `prepare` leaves: finished shards' records (or a finished manifest)
    return path.is_dir() and (any(path.glob("shard_*.json")) or (path / "manifest.json").is_file())


def _add_corpus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        metavar="PATH",
        help="text files (.gz, .xz, .bz2 are read compressed) or directories of them (recursively)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="lines: one sentence per line, blank line between documents (the original format); paragraphs: "
        "the same with a paragraph per line, split into sentences; file: one document per file; prose: running text split into sentences; jsonl: a 'text' field per line; "
        "auto: jsonl for .jsonl/.json, else lines",
    )
    p.add_argument(
        "--on-error", choices=("raise", "skip"), default="raise", help="undecodable/malformed lines"
    )
    p.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _announce_files(args: argparse.Namespace) -> None:
    """Say in one line on stderr which files the directories named in --corpus hold (a refused path raises)."""
    files = expand_paths(args.corpus)
    if not args.quiet and any(Path(p).is_dir() for p in args.corpus):
        print(describe_files(args.corpus, files), file=sys.stderr, flush=True)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "vocab",
        help="train a WordPiece vocabulary (vocab.txt) or a byte-level BPE tokenizer (tokenizer.json) from a corpus",
    )
    _add_corpus_args(p)
    p.add_argument(
        "--kind",
        choices=("wordpiece", "bpe"),
        default="wordpiece",
        help="wordpiece: BERT's vocab.txt (default); bpe: a byte-level BPE tokenizer.json laid out as "
        "ModernBERT's (--cased keeps case, else it lower-cases too)",
    )
    p.add_argument("--vocab-size", type=A.int_range(6, 10_000_000), required=True)
    A.add_output(p, "--out", kind="file", help="vocab.txt (or, with --kind bpe, tokenizer.json) to write")
    p.add_argument(
        "--min-frequency", type=A.positive_int, default=2,
        help="a word piece enters the vocabulary only if it occurs at least this often (default 2)",
    )  # fmt: skip
    p.set_defaults(func=run_vocab)

    p = subparsers.add_parser("prepare", help="tokenize a corpus into binary shards for pre-training")
    _add_corpus_args(p)
    p.add_argument(
        "--vocab",
        required=True,
        type=A.existing_path,
        help="vocab.txt, a byte-level BPE tokenizer.json (`bertkit vocab --kind bpe`) or a folder holding one",
    )
    A.add_output(p, "--out", kind="dir", resumable=_prepare_started, help="data directory to write")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted prepare in --out (finished shards are kept)",
    )
    p.add_argument("--max-seq-length", type=A.int_range(8, 8192), default=128)
    p.add_argument(
        "--workers",
        type=A.positive_int,
        default=1,
        help="worker processes (default 1; at most the usable CPUs and the shards)",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="build the shards on a Dask cluster: a running scheduler (tcp://host:8786; --out must be on "
        "storage every worker sees) or local:N for N local worker processes (needs bertkit[cluster])",
    )
    p.add_argument(
        "--cluster-timeout",
        type=A.positive_float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for the scheduler and its first worker (default 30)",
    )
    p.add_argument(
        "--shard-size-mb", type=A.positive_float, default=4.0, help="text per shard (memory ~ workers x this)"
    )
    p.add_argument("--static", action="store_true", help="also write the original's static instances")
    p.add_argument("--dupe-factor", type=A.positive_int, default=10)
    p.add_argument("--masked-lm-prob", type=A.open_probability, default=0.15)
    p.add_argument("--max-predictions-per-seq", type=A.positive_int, default=20)
    p.add_argument("--short-seq-prob", type=A.probability, default=0.1)
    p.add_argument("--whole-word-mask", action="store_true")
    p.add_argument("--seed", type=int, default=12345)
    p.set_defaults(func=run_prepare)


def run_vocab(args: argparse.Namespace) -> dict:
    from bertkit.data.vocab import train_vocab
    from bertkit.data.vocab_bpe import train_bpe

    _announce_files(args)
    train = train_bpe if args.kind == "bpe" else train_vocab
    return train(
        args.corpus,
        args.vocab_size,
        args.out,
        lowercase=not args.cased,
        fmt=args.format,
        on_error=args.on_error,
        min_frequency=args.min_frequency,
        progress=not args.quiet,
    )


def run_prepare(args: argparse.Namespace) -> dict:
    from bertkit.data.shard_build import resolve_vocab
    from bertkit.data.shards import prepare

    if args.cluster is not None and args.workers != 1:
        raise UserError("--workers and --cluster: give one (a cluster's processes are its workers)")
    if args.static and resolve_vocab(args.vocab)[1] == "bpe":
        # the original's instances mask whole words by WordPiece's "##" pieces and were only ever made so
        raise UserError(f"--static: {args.vocab} is a BPE tokenizer; static instances need a WordPiece vocab.txt "
                        "(leave --static out: pretrain masks BPE data dynamically)")  # fmt: skip
    _announce_files(args)
    result = prepare(
        args.corpus,
        args.vocab,
        args.out,
        max_seq_length=args.max_seq_length,
        workers=args.workers,
        lowercase=not args.cased,
        fmt=args.format,
        on_error=args.on_error,
        shard_size_mb=args.shard_size_mb,
        progress=not args.quiet,
        cluster=args.cluster,
        cluster_timeout=args.cluster_timeout,
    )
    if args.static:
        from bertkit.data.instances import create_static_from_shards

        result["static"] = create_static_from_shards(
            args.out,
            Path(args.out) / "static_instances.npz",
            max_seq_length=args.max_seq_length,
            dupe_factor=args.dupe_factor,
            short_seq_prob=args.short_seq_prob,
            masked_lm_prob=args.masked_lm_prob,
            max_predictions_per_seq=args.max_predictions_per_seq,
            seed=args.seed,
            whole_word_mask=args.whole_word_mask,
        )
    return result
