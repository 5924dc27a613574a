"""Encoder inference on real variable-length batches: bertkit ``BertModel`` vs transformers' ``BertModel``
with ``attn_implementation="sdpa"``.

Run alone: ``.venv/bin/python -m benchmarks.bench_encoder [--quick] [--threads 2]``.

Inputs: batches of 32 real sentences drawn (fixed seed) from SST-2 dev and CoNLL-2003 train, tokenized
once with bertkit's tokenizer and padded to the longest in the batch; both models get the very same
padded tensors. Models: all-MiniLM-L6-v2 (real weights, L6 H384) and a BERT-base-sized model
(L12 H768, random weights: transformers builds it, saves it, bertkit loads the same files).
Before timing, every batch's ``last_hidden_state`` (real tokens) and ``pooler_output`` are checked
within 1e-4. bertkit's advantage is internal: it runs every layer on the real tokens only, and
attention on groups of equal-length sequences, so padding costs it nothing. Goal: ratio >= 2.
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch

from .common import check_close, compare, encoder_flops, suite_main
from .inputs import conll_sentences, minilm_dir, sample_batches, sst2_sentences

GOAL = 2.0
ATOL = 1e-4


def _models(size: str, tmp: str):
    import transformers

    from bertkit.model import BertModel

    if size == "minilm":
        path = str(minilm_dir())
    else:
        torch.manual_seed(0)
        hf_cfg = transformers.BertConfig()  # bert-base-uncased shape: L12 H768 A12, vocab 30522
        transformers.BertModel(hf_cfg).save_pretrained(tmp)
        path = tmp
    ours = BertModel.from_pretrained(path).eval()
    ref = transformers.BertModel.from_pretrained(path, attn_implementation="sdpa").eval()
    return ours, ref


def _tokenizer():
    from bertkit.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(minilm_dir())  # the bert-base-uncased vocabulary


def bench(size: str, dataset: str, n_batches: int, repeats: int, tok=None) -> dict[str, Any]:
    tok = tok or _tokenizer()
    sentences = sst2_sentences("dev") if dataset == "sst2" else conll_sentences("train")
    batches = [tok(b, max_length=128) for b in sample_batches(sentences, 32, n_batches, seed=1)]
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["attention_mask"].numel() for b in batches)
    with tempfile.TemporaryDirectory() as tmp:
        ours, ref = _models(size, tmp)
    worst = 0.0
    with torch.inference_mode():
        for i, b in enumerate(batches):
            a, r = ours(**b), ref(**b)
            worst = max(
                worst,
                check_close(
                    a.last_hidden_state,
                    r.last_hidden_state,
                    ATOL,
                    f"{size}/{dataset} batch {i}",
                    b["attention_mask"],
                ),
                check_close(a.pooler_output, r.pooler_output, ATOL, f"{size}/{dataset} batch {i} pooler"),
            )

    def run_ours() -> None:
        with torch.inference_mode():
            for b in batches:
                ours(**b)

    def run_ref() -> None:
        with torch.inference_mode():
            for b in batches:
                ref(**b)

    label = {"minilm": "MiniLM-L6", "base": "BERT-base"}[size]
    return compare(
        f"encoder {label} {dataset} b32",
        run_ours,
        run_ref,
        repeats=repeats,
        warmup=1,
        items=32 * n_batches,
        unit="seq",
        goal=GOAL,
        check=f"max abs diff {worst:.2e} <= {ATOL} (real tokens, pooler)",
        extra={
            "padding_fraction": round(1 - real / padded, 3),
            "batches": n_batches,
            # the encoder over every real token, plus the pooler
            "model_flops_per_call": sum(
                encoder_flops(ours.config, b["attention_mask"].sum(1).tolist())
                + 2 * len(b["input_ids"]) * ours.config.hidden_size**2
                for b in batches
            ),
        },
    )


def run(args: Any = None) -> list[dict[str, Any]]:
    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (3 if quick else 5)
    tok = _tokenizer()
    plan = [("minilm", "sst2"), ("minilm", "conll"), ("base", "sst2"), ("base", "conll")]
    if quick:
        plan = [("minilm", "sst2"), ("base", "sst2")]
    results = []
    for size, dataset in plan:
        n_batches = (2 if quick else 4) if size == "base" else (4 if quick else 8)
        results.append(bench(size, dataset, n_batches, repeats, tok))
    return results


def main(argv: list[str] | None = None) -> None:
    suite_main(run, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    main()
