"""The most that skipping padding can buy on the benchmarks' own inputs: padded against real work.

    .venv/bin/python -m benchmarks.work_ceiling [--out F.json]

bertkit runs only the real tokens of a batch (packed rows, attention per length group); transformers and
sentence-transformers pad every sequence of a batch to its longest. At equal FLOP/s on both sides, ours can be
at most (the reference's model FLOPs) / (ours) faster: this script computes that ceiling for the encoder
suite's batches (SST-2 dev and CoNLL-2003 train, batches of 32, the same seeds and counts as
``benchmarks.bench_encoder``) and for ``benchmarks.bench_embed_train``'s batches (SQuAD question/paragraph pairs,
each text kind padded to its longest, 128 tokens at most). Where both sides run the same GEMM library (bf16 on
oneDNN), a measured ratio above the ceiling means ours also does more per FLOP; a goal above the ceiling
cannot be met by doing less work.

Model FLOPs per layer: 2 (4 h^2 + 2 h f) per token for the projections and the feed-forward, and 4 h per
(query, key) pair for the attention scores and the weighted sum (h hidden, f feed-forward size).
"""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace
from typing import Any

from bertkit.flops import encoder_flops
from bertkit.io import atomic_write_json

from .bench_embed_train import sampled_split
from .bench_encoder import batch_count, sentence_batches
from .inputs import NoData, minilm_dir

SHAPES = {"minilm": (6, 384, 1536), "base": (12, 768, 3072)}  # layers, hidden, feed-forward
MAX_TOKENS = 128


def model_flops(layers: int, hidden: int, ffn: int, lengths: list[int], padded_to: int | None) -> float:
    """Forward model FLOPs of one batch whose sequences have ``lengths`` real tokens, each padded to
    ``padded_to`` (None: no padding, as bertkit runs it)."""
    shape = SimpleNamespace(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=ffn)
    return encoder_flops(shape, [padded_to or n for n in lengths])


def ceiling_row(name: str, shape: str, batches: list[list[int]]) -> dict[str, Any]:
    """One row: ``batches`` are lists of real lengths, each list padded to its longest by the reference."""
    layers, hidden, ffn = SHAPES[shape]
    real = sum(sum(b) for b in batches)
    padded = sum(len(b) * max(b) for b in batches)
    ours = sum(model_flops(layers, hidden, ffn, b, None) for b in batches)
    ref = sum(model_flops(layers, hidden, ffn, b, max(b)) for b in batches)
    return {
        "name": name,
        "real_tokens": real,
        "padded_tokens": padded,
        "token_ratio": round(padded / real, 3),
        "flop_ratio": round(ref / ours, 3),
    }


def encoder_rows(tok) -> list[dict[str, Any]]:
    """The encoder suite's batches (``bench_encoder``'s own inputs and batch counts, full run)."""
    rows = []
    for dataset in ("sst2", "conll"):
        for shape in ("minilm", "base"):
            batches = [
                tok(b, max_length=MAX_TOKENS)["attention_mask"].sum(1).tolist()
                for b in sentence_batches(dataset, batch_count(shape))
            ]
            label = "MiniLM-L6" if shape == "minilm" else "BERT-base"
            rows.append(ceiling_row(f"encoder {label} {dataset} b32", shape, batches))
    return rows


def train_embed_row(tok, pairs: int = 512, batch: int = 32) -> dict[str, Any]:
    """bench_embed_train's batches: ``pairs`` SQuAD (question, paragraph) pairs sampled with seed 0, each
    batch's questions and paragraphs padded apart (as sentence-transformers tokenizes each column)."""
    train = sampled_split(pairs, n_queries=200)[0]  # the bench's full run samples 200 queries after them

    def length(text: str) -> int:
        return int(tok([text], max_length=MAX_TOKENS)["attention_mask"].sum())

    batches = [
        [length(t[key]) for t in train[i : i + batch]]
        for i in range(0, pairs, batch)
        for key in ("query", "positive")
    ]
    return ceiling_row(f"train-embed MNRL MiniLM {pairs} pairs", "minilm", batches)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args(argv)
    from bertkit.tokenizer import Tokenizer

    try:
        tok = Tokenizer.from_pretrained(minilm_dir())
        rows = encoder_rows(tok) + [train_embed_row(tok)]
    except NoData as e:
        print(f"skipped: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for r in rows:
        print(f"{r['name']}: padded/real tokens {r['token_ratio']:.3f}, model FLOPs {r['flop_ratio']:.3f}")
    if args.out:
        from .common import _commit

        atomic_write_json(
            args.out, {"command": "python -m benchmarks.work_ceiling", "commit": _commit(), "rows": rows}
        )


if __name__ == "__main__":
    main()
