"""Benchmark: one ELECTRA pre-training step (generator + discriminator, forward + backward + AdamW) of bertkit
against the same pair of networks built from transformers' ELECTRA classes, same weights, same batch, same
optimizer, same threads.

Run: ``.venv/bin/python -m benchmarks.bench_electra [--sizes mini small] [--repeats 5] [--threads N]``
(``benchmarks.run`` calls :func:`run` as the ``electra`` suite).

transformers has no ELECTRA pre-training loop, so the reference is the step a transformers user writes, as
ELECTRA's paper and code describe it: an ``ElectraForMaskedLM`` generator (1/4 of the discriminator's width)
and an ``ElectraForPreTraining`` discriminator sharing one embedding layer, the generator's output layer tied
to the shared token embeddings, 85% of the masked positions shown as ``[MASK]``, replacements drawn from the
generator's softmax by Gumbel-max, and the loss MLM + 50 x replaced-token detection. Both sides start from the
same weights: ours saves both networks in transformers' ELECTRA layout and the reference loads those folders.
Before timing, the generator's logits at the masked positions and the discriminator's logits at every real
token are checked equal in eval mode (the sampled replacements differ by design: each side draws its own).
The batch is bench_pretrain's (32 x 128, 15% masked, one sequence in ten shorter). Timing alternates the
sides after warm-up, as every pre-training row (`common.compare`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from bertkit.flops import electra_training_flops

from .below_peak import largest_gemm
from .bench_pretrain import make_batch
from .common import compare, paired_rows, suite_settings

STEP_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels")


class ReferenceElectra(nn.Module):
    """transformers' ELECTRA networks trained together, as a user of transformers writes the step."""

    def __init__(
        self,
        discriminator: nn.Module,
        generator: nn.Module,
        mask_token_id: int = 103,
        mask_token_prob: float = 0.85,
        discriminator_weight: float = 50.0,
    ) -> None:
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.generator.electra.embeddings = discriminator.electra.embeddings  # one shared embedding layer
        self.generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        self.mask_token_id = mask_token_id
        self.mask_token_prob = mask_token_prob
        self.discriminator_weight = discriminator_weight

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor, labels: Tensor):
        """[B, T] each (``labels``: the original token at masked positions, -100 elsewhere) -> the joint loss."""
        masked = labels != -100
        original = torch.where(masked, labels, input_ids)
        show = masked & (torch.rand(input_ids.shape) < self.mask_token_prob)
        generator_input = torch.where(show, torch.full_like(original, self.mask_token_id), original)
        gen = self.generator(
            input_ids=generator_input,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            labels=labels,
        )
        with torch.no_grad():  # Gumbel-max: one draw from each masked position's softmax
            logits = gen.logits[masked].float()
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_(1e-9, 1.0)))
            corrupted = original.clone()
            corrupted[masked] = (logits + gumbel).argmax(-1)
            replaced = (corrupted != original).long()
        disc = self.discriminator(
            input_ids=corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=replaced
        )
        return gen.loss + self.discriminator_weight * disc.loss


def build_pair(size: str, batch_size: int = 32, seq: int = 128, **overrides) -> tuple:
    """(ours, theirs, batch, check): bertkit's ElectraPretrainingModel of BERT preset ``size`` (``overrides``:
    config fields) and :class:`ReferenceElectra` with the same weights, one pre-training batch (the step's keys
    only), and :func:`check_pair`'s differences (raises when they differ)."""
    import transformers

    from bertkit.config import BertConfig
    from bertkit.electra import ElectraPretrainingModel

    torch.manual_seed(0)
    cfg = BertConfig.preset(size, **overrides)
    ours = ElectraPretrainingModel(cfg, generator_fraction=0.25)
    with tempfile.TemporaryDirectory() as tmp:
        disc_dir, gen_dir = ours.save_pretrained_electra(tmp)
        theirs = ReferenceElectra(
            transformers.ElectraForPreTraining.from_pretrained(disc_dir, attn_implementation="sdpa"),
            transformers.ElectraForMaskedLM.from_pretrained(gen_dir, attn_implementation="sdpa"),
        )
    batch = {k: v for k, v in make_batch(cfg.vocab_size, batch_size, seq).items() if k in STEP_KEYS}
    return ours, theirs, batch, check_pair(ours, theirs, batch, size)


def check_pair(ours: nn.Module, theirs: ReferenceElectra, batch: dict, label: str) -> dict[str, float]:
    """The largest differences, in eval mode, between the two sides' generator logits at the masked positions
    and discriminator logits at every real token; AssertionError naming ``label`` when one exceeds 1e-3."""
    ours.eval()
    theirs.eval()
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    masked = batch["labels"] != -100
    original = torch.where(masked, batch["labels"], ids)
    real = mask.bool()
    with torch.no_grad():
        gen_ours = ours.generator_logits(ids, mask, types, masked)
        gen_theirs = theirs.generator(input_ids=ids, attention_mask=mask, token_type_ids=types).logits[masked]
        disc_ours = ours.discriminator_logits(original, mask, types)
        disc_theirs = theirs.discriminator(
            input_ids=original, attention_mask=mask, token_type_ids=types
        ).logits
    check = {
        "max_generator_logit_diff": float((gen_ours - gen_theirs).abs().max()),
        "max_discriminator_logit_diff": float((disc_ours[real] - disc_theirs[real]).abs().max()),
    }
    if max(check.values()) > 1e-3:
        raise AssertionError(f"ELECTRA {label}: outputs differ ({check})")
    return check


def _step(model: nn.Module, opt: torch.optim.Optimizer, batch: dict, precision: str = "fp32") -> Tensor:
    """One optimizer step of either side (``compare`` times the call); returns the loss."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = model(**batch)
    loss = out if isinstance(out, Tensor) else out.loss
    loss.backward()
    opt.step()
    return loss.detach()


def bench_size(
    size: str,
    repeats: int = 5,
    warmup: int = 2,
    batch_size: int = 32,
    seq: int = 128,
    precision: str = "fp32",
    ref_precision: str | None = None,
) -> dict:
    """One ELECTRA step of each side (``precision``: fp32, bf16 autocast, or "auto": what ``--precision auto``
    picks on this machine for ours; ``ref_precision``: the reference's, default the same); outputs are checked
    equal in fp32 eval mode first."""
    import transformers

    from bertkit.train.optim import build_optimizer

    ours, theirs, batch, check = build_pair(size, batch_size, seq)
    ours.train()
    theirs.train()
    ref_precision = ref_precision or precision
    chosen = None
    if precision == "auto":
        from bertkit.train.precision import choose_precision

        chosen = choose_precision(ours, batch, lambda m, b: m(**b).loss, torch.device("cpu"))
        precision = chosen
    opt_ours = build_optimizer(ours, "adamw", lr=1e-4)
    opt_theirs = build_optimizer(theirs, "adamw", lr=1e-4)
    label = f"ELECTRA step BERT-{size} ({batch_size}x{seq}, 15% masked, generator 1/4, AdamW"
    if chosen is not None:
        label += f", ours auto->{chosen} vs ref {ref_precision}"
    elif precision != "fp32" or ref_precision != precision:
        label += f", {precision}" + (f" vs ref {ref_precision}" if ref_precision != precision else "")
    label += ")"
    lengths = batch["attention_mask"].sum(1).tolist()
    masked = int((batch["labels"] != -100).sum())
    return compare(
        label,
        lambda: _step(ours, opt_ours, batch, precision),
        lambda: _step(theirs, opt_theirs, batch, ref_precision),
        repeats=repeats,
        warmup=warmup,
        items=int(batch["attention_mask"].sum()),
        unit="tokens",
        goal=3.0,
        check=f"generator {check['max_generator_logit_diff']:.1e}, "
        f"discriminator {check['max_discriminator_logit_diff']:.1e}",
        extra={
            **check,
            "device": "cpu",
            "precision": precision,
            "ref_precision": ref_precision,
            "precision_auto": chosen is not None,
            "masked_tokens": masked,
            "model_flops_per_call": electra_training_flops(
                ours.config, ours.generator_config, lengths, masked
            ),
            # the reference runs every padded position, and the generator's decoder at all of them
            "ref_work_flops_per_call": electra_training_flops(
                ours.config, ours.generator_config, [seq] * batch_size, batch_size * seq
            ),
            # ours packs the batch's real tokens into one GEMM per projection; the discriminator's is the largest
            "gemm_shape": largest_gemm(sum(lengths), ours.config.hidden_size, ours.config.intermediate_size),
            "lengths": lengths,
            "sequences": batch_size,
            "seq_len": seq,
            "reference_impl": f"transformers {transformers.__version__} ElectraForMaskedLM + "
            "ElectraForPreTraining (shared embeddings, Gumbel-max sampling; attn sdpa)",
        },
    )


def run(args=None) -> Iterator[dict]:
    """One row per size, then, on a CPU with native bf16, one per size with ours at ``--precision auto``
    against the reference in fp32 (:func:`benchmarks.common.paired_rows`); each row as soon as it is measured.
    ``args``: namespace/dict with sizes, repeats, warmup, threads, batch_size, seq, mixed ("auto", "bf16")."""
    defaults = dict(
        sizes=["mini", "small"], repeats=5, warmup=2, threads=None, batch_size=32, seq=128, mixed=["auto"]
    )
    ns = suite_settings(defaults, args)
    yield from paired_rows(bench_size, ns, "ELECTRA step")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", default=["mini", "small"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument(
        "--mixed", nargs="*", default=["auto"], help="bf16 rows on a CPU with native bf16: auto, bf16"
    )
    for row in run(p.parse_args(argv)):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
