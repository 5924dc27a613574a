"""Ours-only A/B of ``train_embed`` between checkouts of bertkit: whole training runs, alternating, each in a
fresh process that imports bertkit from its checkout.

    .venv/bin/python benchmarks/ab_train_embed.py --checkout before=/path/to/old --checkout after=. \
        [--pairs 256] [--threads 2] [--runs 3] [--out F.json]

For a change too small for the paired bench against sentence-transformers to see (its two sides run once
each, so run-to-run noise of a few percent decides its ratio): the same training (SQuAD v1.1 dev questions
with their paragraphs, a seeded sample of ``--pairs``, all-MiniLM-L6-v2, MNRL, batch 32, one epoch, fp32)
run ``--runs`` times per checkout, checkouts alternating. Reported per checkout: pairs/s of the training loop
(``Trainer.fit``'s span, as the bench) per run and their median, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(pairs: int, threads: int, minilm: str, squad: str) -> dict:
    """One training run in this process (bertkit from PYTHONPATH) on the MiniLM folder ``minilm`` and SQuAD file
    ``squad``; returns its timing. The parent picks both (``benchmarks.inputs``): the child imports nothing from
    this project's root, whose bertkit would shadow the checkout's."""
    import random
    import resource
    import tempfile

    import torch

    import bertkit
    from bertkit.sentence.data import Pair, squad_split
    from bertkit.sentence.encoder import SentenceEncoder
    from bertkit.sentence.train_embed import EmbedSettings, train_embed

    torch.set_num_threads(threads)
    train, _, _ = squad_split(Path(squad))
    sample = random.Random(0).sample(train, pairs)
    data = [Pair(t["query"], t["positive"]) for t in sample]
    settings = EmbedSettings(loss="mnrl", epochs=1, batch_size=32, lr=2e-5, warmup_ratio=0.1, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        model = SentenceEncoder.from_pretrained(minilm, max_seq_length=128)
        out = train_embed(model, data, Path(tmp) / "run", settings, progress=False, plot=False)
    return {
        "bertkit": str(Path(bertkit.__file__).parent),
        "train_seconds": out["train_seconds"],
        "pairs_per_s": pairs / out["train_seconds"],
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", action="append", default=[], metavar="LABEL=PATH", help="a bertkit checkout")
    p.add_argument("--pairs", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--minilm", help=argparse.SUPPRESS)  # the child's MiniLM folder, chosen by the parent
    p.add_argument("--squad", help=argparse.SUPPRESS)  # and its SQuAD file
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.pairs, args.threads, args.minilm, args.squad)))
        return
    sys.path.insert(0, str(ROOT))  # run as a file: the benchmarks package from this project's root
    from benchmarks.bench_embed_train import SQUAD as squad  # the file the side-by-side bench reads
    from benchmarks.inputs import NoData, minilm_dir

    # the command line first, the data it needs after: a wrong command says so wherever it runs
    bad = [c for c in args.checkout if "=" not in c]
    if bad:
        sys.exit(f"--checkout {bad[0]!r}: expected LABEL=PATH")
    checkouts = dict(c.split("=", 1) for c in args.checkout)
    if len(checkouts) < 2:
        sys.exit("--checkout LABEL=PATH at least twice")
    if not squad.is_file():
        sys.exit(f"{squad} not found: this A/B needs the shared SQuAD data")
    from benchmarks.common import child_json, environment

    try:  # $BERTKIT_BENCH_MINILM or the installed package
        minilm = str(minilm_dir())
    except NoData as e:
        sys.exit(str(e))
    runs: dict[str, list[dict]] = {label: [] for label in checkouts}
    child_args = [__file__, "--child", "--pairs", str(args.pairs), "--threads", str(args.threads)]
    child_args += ["--minilm", minilm, "--squad", str(squad)]
    for r in range(args.runs):
        for label, path in checkouts.items():
            # by file, not -m: the script's folder leads sys.path, so bertkit comes from the checkout's PYTHONPATH
            runs[label].append(child_json(child_args, env={"PYTHONPATH": str(Path(path).resolve())}))
            print(f"run {r + 1} {label}: {runs[label][-1]['pairs_per_s']:.2f} pairs/s", flush=True)
    summary = {
        label: {
            "checkout": checkouts[label],
            "median_pairs_per_s": statistics.median(x["pairs_per_s"] for x in rs),
            "max_rss_mb": max(x["max_rss_mb"] for x in rs),
            "runs": rs,
        }
        for label, rs in runs.items()
    }
    for label, s in summary.items():
        print(f"{label}: median {s['median_pairs_per_s']:.2f} pairs/s, max RSS {s['max_rss_mb']:.0f} MB")
    if args.out:
        from bertkit.io import atomic_write_json

        command = "python benchmarks/ab_train_embed.py " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        atomic_write_json(args.out, {"command": command, "environment": environment(), "checkouts": summary})


if __name__ == "__main__":
    main()
