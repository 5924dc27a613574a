"""One fine-tuning step (forward + backward + AdamW) of bertkit's heads against transformers' classes of
the same names, same weights, same batch, same optimizer, same threads.

Run alone: ``.venv/bin/python -m benchmarks.bench_finetune [--quick] [--threads 2]``.

- SQuAD-shaped: ``BertForQuestionAnswering``, batch 8 x 384: real (question, context) pairs of SQuAD
  v1.1 dev, truncated (``only_second``) and padded to 384 as the original ``run_squad.py`` does;
  start/end labels inside each sequence.
- SST-2-shaped: ``BertForSequenceClassification`` (2 labels), batch 32 of SST-2 train sentences padded
  to the longest, real labels.

Both start from all-MiniLM-L6-v2's real encoder weights plus one randomly initialised head (bertkit
builds it and saves it; transformers loads those files, so the weights are identical). The optimizer is
``bertkit.train.optim.build_optimizer`` (AdamW, decay 0.01, none on bias/LayerNorm) for both. Before
timing, in eval mode (no dropout), the loss, the logits and every parameter gradient are checked equal
(loss/logits 1e-4, gradients 1e-4 relative to the largest; for QA the loss over real positions, as the
logits at padded positions carry no meaning in either library). Timing runs in training mode (dropout 0.1).
Goal: ratio >= 1.3.
"""

from __future__ import annotations

import json
import logging
import random
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from bertkit.flops import encoder_flops

from .below_peak import largest_gemm
from .common import Mismatch, check_close, compare, suite_main
from .inputs import SHARED_DATA, NoData, minilm_dir, minilm_weights, sample_batches

GOAL = 1.3


def _squad_pairs() -> list[tuple[str, str]]:
    path = SHARED_DATA / "squad" / "dev-v1.1.json"
    if not path.is_file():
        raise NoData(f"{path} not found")
    data = json.loads(path.read_text(encoding="utf-8"))
    return [(qa["question"], p["context"]) for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]


def squad_batch(tok, seed: int = 0, batch: int = 8, seq: int = 384) -> dict[str, torch.Tensor]:
    rng = random.Random(seed)
    pairs = rng.sample(_squad_pairs(), batch)
    enc = tok(
        [q for q, _ in pairs],
        [c for _, c in pairs],
        max_length=seq,
        truncation="only_second",
        padding="max_length",
    )
    lengths = enc["attention_mask"].sum(1)
    g = torch.Generator().manual_seed(seed)
    start = (torch.rand(batch, generator=g) * (lengths - 2).float()).long() + 1
    end = torch.minimum(start + torch.randint(0, 8, (batch,), generator=g), lengths - 2)
    return {**enc, "start_positions": start, "end_positions": end}


def sst2_batch(tok, seed: int = 0, batch: int = 32) -> dict[str, torch.Tensor]:
    from .inputs import sst2_labelled

    rows = sample_batches(sst2_labelled("train"), batch, 1, seed)[0]
    enc = tok([s for s, _ in rows], max_length=128)
    return {**enc, "labels": torch.tensor([y for _, y in rows])}


def _pair(task: str, tmp: str):
    import transformers

    from bertkit.heads.finetune import BertForQuestionAnswering, BertForSequenceClassification

    torch.manual_seed(0)
    log = logging.getLogger("bertkit")
    level = log.level
    log.setLevel(logging.ERROR)  # the new head's "freshly initialised" notice is expected here
    try:
        if task == "squad":
            ours = BertForQuestionAnswering.from_pretrained(minilm_dir())
            cls = transformers.BertForQuestionAnswering
        else:
            ours = BertForSequenceClassification.from_pretrained(minilm_dir(), num_labels=2)
            cls = transformers.BertForSequenceClassification
    finally:
        log.setLevel(level)
    ours.save_pretrained(tmp)
    ref = cls.from_pretrained(tmp, attn_implementation="sdpa")
    return ours, ref


def _qa_loss(out, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    pad = batch["attention_mask"] == 0
    start = out.start_logits.masked_fill(pad, float("-inf"))
    end = out.end_logits.masked_fill(pad, float("-inf"))
    f = torch.nn.functional.cross_entropy
    return (f(start, batch["start_positions"]) + f(end, batch["end_positions"])) / 2


def _check(ours, ref, batch: dict[str, torch.Tensor], what: str) -> str:
    """Eval-mode loss, logits and all gradients equal; leaves grads cleared."""
    ours.eval()
    ref.eval()
    a, b = ours(**batch), ref(**batch)
    if "start_positions" in batch:
        # The QA heads' own losses are a softmax over all 384 positions, padding included, and what a
        # model leaves at padded positions carries no meaning (bertkit leaves the head's bias there,
        # transformers the encoding of [PAD] tokens), so compare the loss over real positions only.
        loss_a, loss_b = _qa_loss(a, batch), _qa_loss(b, batch)
    else:
        loss_a, loss_b = a.loss, b.loss
    loss_a.backward()
    loss_b.backward()
    check_close(loss_a, loss_b, 1e-4, f"{what} loss")
    for name in ("logits", "start_logits", "end_logits"):
        if getattr(a, name, None) is not None:
            mask = batch["attention_mask"] if name != "logits" else None
            check_close(getattr(a, name), getattr(b, name), 1e-4, f"{what} {name}", mask)
    theirs = dict(ref.named_parameters())
    # Gradients that are zero in exact arithmetic (the key bias: softmax ignores a per-query constant)
    # are float noise in both, so each tensor's scale is floored at 1e-2 of the largest gradient.
    floor = 1e-2 * max(float(q.grad.abs().max()) for q in theirs.values() if q.grad is not None)
    worst = 0.0
    for name, p in ours.named_parameters():
        q = theirs.get(name)
        if q is None:
            raise Mismatch(f"{what}: transformers has no parameter {name}")
        if (p.grad is None) != (q.grad is None):
            raise Mismatch(f"{what}: only one side has a gradient for {name}")
        if p.grad is None:
            continue
        scale = max(float(q.grad.abs().max()), floor)
        rel = float((p.grad - q.grad).abs().max()) / scale
        worst = max(worst, rel)
        if rel > 1e-4:
            raise Mismatch(f"{what}: gradient of {name} differs (relative {rel:.2e})")
    ours.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    ours.train()
    ref.train()
    return f"loss/logits <= 1e-4, max relative grad diff {worst:.1e}"


def bench(task: str, repeats: int, tok=None) -> dict[str, Any]:
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.optim import build_optimizer

    tok = tok or Tokenizer.from_pretrained(minilm_dir())
    batch = squad_batch(tok) if task == "squad" else sst2_batch(tok)
    with tempfile.TemporaryDirectory() as tmp:
        ours, ref = _pair(task, tmp)
    check = _check(ours, ref, batch, f"finetune {task}")
    opt_ours = build_optimizer(ours, "adamw", lr=3e-5)
    opt_ref = build_optimizer(ref, "adamw", lr=3e-5)

    def step(model, opt) -> None:
        opt.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        opt.step()

    b, t = batch["input_ids"].shape
    name = "finetune SQuAD QA 8x384" if task == "squad" else f"finetune SST-2 cls {b}x{t}"
    return compare(
        name + " (MiniLM)",
        lambda: step(ours, opt_ours),
        lambda: step(ref, opt_ref),
        repeats=repeats,
        warmup=1,
        items=b,
        unit="seq",
        goal=GOAL,
        check=check,
        extra={
            "padding_fraction": round(1 - float(batch["attention_mask"].float().mean()), 3),
            # forward + backward of the encoder over the real tokens (the small heads are not counted)
            "model_flops_per_call": 3.0 * encoder_flops(ours.config, batch["attention_mask"].sum(1).tolist()),
            "gemm_shape": largest_gemm(
                int(batch["attention_mask"].sum()), ours.config.hidden_size, ours.config.intermediate_size
            ),
        },
    )


def run(args: Any = None) -> Iterator[dict[str, Any]]:
    """The rows, each as soon as it is measured (``tasks``: a subset of "squad", "sst2")."""
    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (3 if quick else 5)
    from bertkit.tokenizer import Tokenizer

    minilm = minilm_dir()
    tok, weights = Tokenizer.from_pretrained(minilm), minilm_weights(minilm)
    for task in getattr(args, "tasks", None) or ("squad", "sst2"):
        yield {**bench(task, repeats, tok), "minilm_weights": weights}


def main(argv: list[str] | None = None) -> None:
    suite_main(run, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    main()
