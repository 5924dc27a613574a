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

On a CPU with native bf16 (AVX512-BF16 or AMX), two more rows per model and dataset: ours with
``--precision auto`` (what ``bertkit embed/serve --precision auto`` runs here) against transformers' default
fp32, and both sides under bf16 autocast. Their outputs are checked differently, as bf16 rounds: every real
token's last hidden state must keep a cosine >= 0.999 to transformers' fp32 one.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from bertkit.flops import encoder_flops
from bertkit.inference_precision import MIN_TOKEN_COSINE, outputs_agree, resolve_inference_precision

from .below_peak import largest_gemm
from .common import Mismatch, bf16_supported, check_close, compare, suite_main
from .inputs import conll_sentences, minilm_dir, minilm_weights, sample_batches, sst2_sentences

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


def _bf16_context(on: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()


def batch_count(size: str, quick: bool = False) -> int:
    """Batches of 32 per row: half as many for BERT-base (the slower model), half again with ``--quick``."""
    return (2 if quick else 4) if size == "base" else (4 if quick else 8)


def sentence_batches(dataset: str, n_batches: int) -> list[list[str]]:
    """The suite's inputs (and ``benchmarks.work_ceiling``'s): ``n_batches`` batches of 32 sentences from SST-2
    dev ("sst2") or CoNLL-2003 train ("conll"), sampled with seed 1."""
    sentences = sst2_sentences("dev") if dataset == "sst2" else conll_sentences("train")
    return sample_batches(sentences, 32, n_batches, seed=1)


def bench(
    size: str, dataset: str, n_batches: int, repeats: int, tok=None, precision: str = "fp32"
) -> dict[str, Any]:
    """One row: ours against transformers on ``n_batches`` batches of 32. ``precision``: "fp32" (both
    sides), "auto" (ours as ``--precision auto`` resolves here, transformers fp32) or "bf16" (both sides
    under bf16 autocast)."""
    tok = tok or _tokenizer()
    batches = [tok(b, max_length=128) for b in sentence_batches(dataset, n_batches)]
    with tempfile.TemporaryDirectory() as tmp:
        ours, ref = _models(size, tmp)
    ours_bf16 = ref_bf16 = precision == "bf16"
    if precision == "auto":
        ours_bf16 = resolve_inference_precision("auto", ours) == "bf16"
    if ours_bf16:
        return _bench_bf16(size, dataset, batches, ours, ref, ref_bf16, repeats, precision)
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

    label = _LABELS[size] + (", ours auto->fp32 vs ref fp32" if precision == "auto" else "")
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
        extra=_extra(ours, batches),
    )


_LABELS = {"minilm": "MiniLM-L6", "base": "BERT-base"}


def _extra(ours, batches: list[dict], **more: Any) -> dict[str, Any]:
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["attention_mask"].numel() for b in batches)
    return {
        "padding_fraction": round(1 - real / padded, 3),
        "batches": len(batches),
        # ours runs each batch's real tokens packed: its typical largest GEMM has the mean batch's rows
        "gemm_shape": largest_gemm(
            real // max(len(batches), 1), ours.config.hidden_size, ours.config.intermediate_size
        ),
        # the encoder over every real token, plus the pooler
        "model_flops_per_call": sum(
            encoder_flops(ours.config, b["attention_mask"].sum(1).tolist())
            + 2 * len(b["input_ids"]) * ours.config.hidden_size**2
            for b in batches
        ),
        **more,
    }


def _bench_bf16(
    size: str, dataset: str, batches: list[dict], ours, ref, ref_bf16: bool, repeats: int, precision: str
) -> dict[str, Any]:
    """The bf16 rows: outputs judged by each real token's cosine to transformers' fp32 hidden state."""
    worst = 1.0
    with torch.inference_mode():
        for b in batches:
            with _bf16_context(True):
                a = ours(**b).last_hidden_state
            r = ref(**b).last_hidden_state
            ok, cos = outputs_agree(r, a, b["attention_mask"])
            worst = min(worst, cos)
            if not ok:
                raise Mismatch(
                    f"{size}/{dataset} bf16: a real token's cosine to fp32 is {cos:.5f} < {MIN_TOKEN_COSINE}"
                )

    def run(model, bf16: bool):
        def call() -> None:
            with torch.inference_mode(), _bf16_context(bf16):
                for b in batches:
                    model(**b)

        return call

    how = "ours auto->bf16 vs ref fp32" if precision == "auto" else "bf16"
    return compare(
        f"encoder {_LABELS[size]} {dataset} b32 ({how})",
        run(ours, True),
        run(ref, ref_bf16),
        repeats=repeats,
        warmup=1,
        items=32 * len(batches),
        unit="seq",
        goal=GOAL,
        check=f"smallest cosine of a real token's state to transformers' fp32 one {worst:.5f} >= {MIN_TOKEN_COSINE}",
        extra=_extra(ours, batches, precision="bf16", ref_precision="bf16" if ref_bf16 else "fp32"),
    )


def run(args: Any = None) -> Iterator[dict[str, Any]]:
    """The rows, each as soon as it is measured. ``args`` may also narrow the plan: ``models``
    ("minilm", "base"), ``datasets`` ("sst2", "conll"), ``precisions`` ("fp32", "auto", "bf16"; the last two
    only on a CPU with native bf16) and ``batches`` (batches of 32 per row, instead of :func:`batch_count`)."""
    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (3 if quick else 5)
    tok = _tokenizer()
    plan = [("minilm", "sst2"), ("minilm", "conll"), ("base", "sst2"), ("base", "conll")]
    if quick:
        plan = [("minilm", "sst2"), ("base", "sst2")]
    models, datasets = getattr(args, "models", None), getattr(args, "datasets", None)
    plan = [(m, d) for m, d in plan if (not models or m in models) and (not datasets or d in datasets)]
    precisions = ["fp32"] + (["auto", "bf16"] if bf16_supported() and not quick else [])
    if getattr(args, "precisions", None):
        precisions = [p for p in args.precisions if p == "fp32" or bf16_supported()]
    batches = getattr(args, "batches", None)
    weights = minilm_weights()  # real or stand-in: the speed is the same, said beside each MiniLM row
    for precision in precisions:
        for size, dataset in plan:
            row = bench(size, dataset, batches or batch_count(size, quick), repeats, tok, precision)
            if size == "minilm":
                row["minilm_weights"] = weights
            yield row


def main(argv: list[str] | None = None) -> None:
    suite_main(run, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    main()
