"""ModernBERT: bertkit's ``ModernBertModel`` / ``ModernBertForMaskedLM`` against transformers' classes
(``attn_implementation="sdpa"``) on the same random weights of a ModernBERT-base-shaped config (L22 H768
A12, GeGLU 1152, vocab 50368, window 128, a global layer every third; no download: transformers builds the
model, saves it, bertkit loads the same files).

Run alone: ``.venv/bin/python -m benchmarks.bench_modernbert [--quick] [--threads 2]``.

Rows:

- variable-length inference: batches of 32 SST-2 dev and CoNLL-2003 train sentences (``benchmarks.inputs``;
  tokenized with the MiniLM folder's WordPiece vocabulary, whose ids all lie inside ModernBERT's), padded to
  the longest; synthetic lengths of the same shape when the shared data or MiniLM is absent (the row says
  which). bertkit runs the real tokens only; transformers' SDPA path runs the padded batch with a mask.
- one 4,096-token and one 8,192-token document (one sequence, no padding), with each side's peak memory.
- a pre-training step: MLM (30% of the tokens labelled), forward + backward + AdamW, 16 x 128 tokens.

Before timing, every row's outputs are checked: last hidden states of real tokens within ``ATOL``; for the
step, loss and every gradient. ``--quick`` (a smoke run, not a measurement) keeps ModernBERT-base's widths
but only 3 layers (one global, two local), fewer batches and a smaller training batch; each row's name says
how many layers it ran.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from .below_peak import largest_gemm
from .common import Mismatch, check_close, compare, suite_main

ATOL = 1e-4
GOAL = 2.0  # the issue's goal for variable-length inference
DOCUMENTS = (4096, 8192)
ROWS = ("batches", "documents", "step")  # the kinds of row, in the order they run
MASK_RATE = 0.3  # ModernBERT's pre-training masking rate


def base_config(layers: int = 22, **overrides: Any) -> Any:
    """transformers' ModernBertConfig with ModernBERT-base's shape (its defaults), ``layers`` deep."""
    import transformers

    settings = dict(num_hidden_layers=layers, global_attn_every_n_layers=3, attn_implementation="sdpa")
    return transformers.ModernBertConfig(**{**settings, **overrides})


def build_pair(config: Any, head: str = "ModernBertModel", seed: int = 0) -> tuple[Any, Any]:
    """(ours, transformers') ``head`` on the same random weights (transformers initialises and saves, bertkit
    loads the files), in eval mode."""
    import transformers

    from bertkit import modernbert

    torch.manual_seed(seed)
    ref = getattr(transformers, head)(config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = getattr(modernbert, head).from_pretrained(tmp).eval()
    return ours, ref


def modernbert_flops(config: Any, lengths: list[int], passes: int = 1) -> float:
    """Model FLOPs of the encoder over sequences of these real lengths: per token and layer the QKV, output and
    GeGLU GEMMs, 2 (4 h^2 + 3 h i); per layer attention's scores and context, 4 h per (query, key) pair, over
    the whole sequence in global layers and the ``local_attention`` window (plus the token) in local ones."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    every = getattr(config, "global_attn_every_n_layers", 3)
    n_global = sum(1 for layer in range(layers) if layer % every == 0)
    window = config.local_attention + 1
    tokens = sum(lengths)
    pairs_global = sum(n * n for n in lengths)
    pairs_local = sum(n * min(n, window) for n in lengths)
    gemms = layers * 2 * (4 * h * h + 3 * h * i) * tokens
    attention = 4 * h * (n_global * pairs_global + (layers - n_global) * pairs_local)
    return float(passes * (gemms + attention))


# ------------------------------------------------------------------------------------------------ inputs
def sentence_batches(
    dataset: str, n_batches: int, seed: int = 1
) -> tuple[list[dict[str, torch.Tensor]], str]:
    """Padded batches of 32 (``input_ids``, ``attention_mask``) and where they came from: real sentences
    (``benchmarks.inputs``) or, without the shared data, synthetic lengths of the dataset's shape."""
    from .inputs import NoData, conll_sentences, minilm_dir, sample_batches, sst2_sentences

    try:
        from bertkit.tokenizer import Tokenizer

        sentences = sst2_sentences("dev") if dataset == "sst2" else conll_sentences("train")
        tok = Tokenizer.from_pretrained(minilm_dir())
        out = []
        for b in sample_batches(sentences, 32, n_batches, seed=seed):
            enc = tok(b, max_length=128)
            out.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
        return out, f"{dataset} sentences (MiniLM WordPiece ids)"
    except NoData:
        return synthetic_batches(dataset, n_batches, seed), f"synthetic {dataset}-like lengths"


def synthetic_batches(dataset: str, n_batches: int, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    """Batches of 32 random-id sequences whose lengths spread as SST-2's (4..66 tokens) or CoNLL's (3..60)."""
    g = torch.Generator().manual_seed(seed)
    low, high = (4, 66) if dataset == "sst2" else (3, 60)
    out = []
    for _ in range(n_batches):
        lengths = torch.randint(low, high + 1, (32,), generator=g)
        width = int(lengths.max())
        mask = (torch.arange(width)[None] < lengths[:, None]).long()
        ids = torch.randint(1000, 30000, (32, width), generator=g) * mask
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def document(length: int, seed: int = 2) -> dict[str, torch.Tensor]:
    """One sequence of ``length`` random ids (no padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30000, (1, length), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def mlm_batch(vocab_size: int, batch: int, seq: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A pre-training batch: one sequence in ten shorter (padded), ``MASK_RATE`` of each sequence's tokens
    labelled and replaced by a mask id."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.full((batch,), seq)
    short = torch.rand(batch, generator=g) < 0.1
    lengths[short] = torch.randint(8, seq, (int(short.sum()),), generator=g)
    mask = (torch.arange(seq)[None] < lengths[:, None]).long()
    ids = torch.randint(1000, vocab_size - 100, (batch, seq), generator=g) * mask
    labels = torch.full_like(ids, -100)
    for i, n in enumerate(lengths.tolist()):
        pos = torch.randperm(n, generator=g)[: max(1, round(MASK_RATE * n))]
        labels[i, pos] = ids[i, pos]
        ids[i, pos] = vocab_size - 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# ------------------------------------------------------------------------------------------------ checks
def check_hidden(ours: Any, ref: Any, batches: list[dict[str, torch.Tensor]], what: str) -> float:
    """Largest |ours - transformers'| last hidden state over every batch's real tokens (Mismatch past ATOL)."""
    worst = 0.0
    with torch.inference_mode():
        for i, b in enumerate(batches):
            a, r = ours(**b).last_hidden_state, ref(**b).last_hidden_state
            worst = max(worst, check_close(a, r, ATOL, f"{what} batch {i}", b["attention_mask"]))
    return worst


def check_step(ours: Any, ref: Any, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Loss and every parameter's gradient of one MLM forward and backward, ours against transformers'."""
    grads = []
    for model in (ours, ref):
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        named = dict(model.named_parameters())
        grads.append((loss.detach(), {k: p.grad for k, p in named.items() if p.grad is not None}))
    (loss_a, ga), (loss_b, gb) = grads
    worst_loss = check_close(loss_a, loss_b, ATOL, "MLM loss")
    missing = sorted(set(gb) - set(ga))
    if missing:
        raise Mismatch(f"ours has no gradient for {len(missing)} of transformers' parameters: {missing[:3]}")
    worst_grad = max(check_close(ga[k], gb[k], ATOL, f"gradient {k}") for k in gb)
    for model in (ours, ref):
        model.zero_grad(set_to_none=True)
    return {"loss_diff": worst_loss, "max_grad_diff": worst_grad}


# ------------------------------------------------------------------------------------------------ rows
def _forward_all(model: Any, batches: list[dict[str, torch.Tensor]]) -> Any:
    def call() -> None:
        with torch.inference_mode():
            for b in batches:
                model(**b)

    return call


def bench_batches(config: Any, dataset: str, n_batches: int, repeats: int) -> dict[str, Any]:
    """Variable-length inference on batches of 32."""
    batches, source = sentence_batches(dataset, n_batches)
    ours, ref = build_pair(config)
    worst = check_hidden(ours, ref, batches, f"ModernBERT {dataset}")
    lengths = [n for b in batches for n in b["attention_mask"].sum(1).tolist()]
    padded = sum(b["attention_mask"].numel() for b in batches)
    return compare(
        f"ModernBERT-base L{config.num_hidden_layers} {dataset} b32",
        _forward_all(ours, batches),
        _forward_all(ref, batches),
        items=32 * n_batches,
        unit="seq",
        goal=GOAL,
        repeats=repeats,
        warmup=1,
        check=f"max abs diff {worst:.2e} <= {ATOL} (real tokens)",
        extra={
            "inputs": source,
            "batches": n_batches,
            "padding_fraction": round(1 - sum(lengths) / padded, 3),
            # ours packs each batch's real tokens: its largest GEMM (GeGLU's input projection) has their rows
            "gemm_shape": largest_gemm(
                sum(lengths) // n_batches, config.hidden_size, 2 * config.intermediate_size
            ),
            "model_flops_per_call": modernbert_flops(config, lengths),
        },
    )


def bench_document(config: Any, length: int, repeats: int) -> dict[str, Any]:
    """One document of ``length`` tokens; the peak resident-set growth of one forward beside each side."""
    doc = document(length)
    ours, ref = build_pair(config)
    worst = check_hidden(ours, ref, [doc], f"ModernBERT {length}-token document")  # also the warm-up
    return compare(
        f"ModernBERT-base L{config.num_hidden_layers} {length}-token document",
        _forward_all(ours, [doc]),
        _forward_all(ref, [doc]),
        repeats=repeats,
        warmup=0,
        items=length,
        unit="tokens",
        check=f"max abs diff {worst:.2e} <= {ATOL}",
        extra={
            "gemm_shape": largest_gemm(length, config.hidden_size, 2 * config.intermediate_size),
            "model_flops_per_call": modernbert_flops(config, [length]),
        },
    )


def bench_pretrain_step(config: Any, batch_size: int, seq: int, repeats: int) -> dict[str, Any]:
    """One MLM pre-training step (forward, backward, AdamW) of each side."""
    ours, ref = build_pair(config, "ModernBertForMaskedLM")
    batch = mlm_batch(config.vocab_size, batch_size, seq)
    check = check_step(ours, ref, batch)
    ours.train()
    ref.train()
    optimizers = {id(m): torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01) for m in (ours, ref)}

    def step(model: Any) -> Any:
        opt = optimizers[id(model)]

        def call() -> None:
            opt.zero_grad(set_to_none=True)
            model(**batch).loss.backward()
            opt.step()

        return call

    lengths = batch["attention_mask"].sum(1).tolist()
    masked = int((batch["labels"] != -100).sum())
    # the MLM head (dense + decoder) on every position: neither side predicts sparsely by default
    head = 2 * batch_size * seq * (config.hidden_size**2 + config.hidden_size * config.vocab_size)
    return compare(
        f"ModernBERT-base L{config.num_hidden_layers} MLM step ({batch_size}x{seq}, 30% masked, AdamW)",
        step(ours),
        step(ref),
        repeats=repeats,
        warmup=1,
        items=sum(lengths),
        unit="tokens",
        check=f"loss {check['loss_diff']:.1e}, gradients {check['max_grad_diff']:.1e} <= {ATOL}",
        extra={
            **check,
            "masked_tokens": masked,
            "gemm_shape": largest_gemm(sum(lengths), config.hidden_size, 2 * config.intermediate_size),
            "model_flops_per_call": 3.0 * (modernbert_flops(config, lengths) + head),
        },
    )


def run(args: Any = None) -> Iterator[dict[str, Any]]:
    """The rows, each as soon as it is measured. ``args``: ``quick``, ``repeats``; ``layers`` (default 22, 3
    with ``quick``), ``batches`` (batches of 32 per variable-length row), ``documents`` (lengths),
    ``step`` ([batch, seq] of the pre-training step), ``rows`` (which kinds to run, of :data:`ROWS`; default
    all, e.g. ``--set 'modernbert.rows=["documents","step"]'`` to finish a run cut short)."""
    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (3 if quick else 5)
    layers = getattr(args, "layers", None) or (3 if quick else 22)
    n_batches = getattr(args, "batches", None) or (2 if quick else 4)
    step = getattr(args, "step", None) or ([4, 128] if quick else [16, 128])
    kinds = getattr(args, "rows", None) or ROWS
    unknown = sorted(set(kinds) - set(ROWS))
    if unknown:
        raise ValueError(f"modernbert.rows: unknown {unknown}; choose from {list(ROWS)}")
    config = base_config(layers)
    if "batches" in kinds:
        for dataset in ("sst2", "conll"):
            yield bench_batches(config, dataset, n_batches, repeats)
    if "documents" in kinds:
        for length in getattr(args, "documents", None) or DOCUMENTS:
            yield bench_document(config, int(length), repeats)
    if "step" in kinds:
        yield bench_pretrain_step(config, int(step[0]), int(step[1]), repeats)


def main(argv: list[str] | None = None) -> None:
    suite_main(run, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    main()
