"""Benchmark: one pre-training step (forward + backward + AdamW) of bertkit's BertForPreTraining against
transformers' BertForPreTraining, same config, same weights, same batch, same optimizer, same threads.

Run: ``.venv/bin/python -m benchmarks.bench_pretrain [--sizes mini small] [--repeats 5] [--threads N]``
(``benchmarks.run`` calls :func:`run`).

The batch is a real pre-training batch shape: 32 sequences x 128 tokens, 15% of the tokens labelled for
the masked LM (at most 20 per sequence, as the original), an NSP label per sequence, and, as the
original's ``short_seq_prob = 0.1``, one sequence in ten shorter (padded). Both models start from the same
weights (ours saved, transformers loads it) and run in training mode (dropout 0.1); the optimizer is
``torch.optim.AdamW`` built the same way for both (decoupled decay 0.01, none on bias/LayerNorm, eps 1e-6).
Before timing, the two models' losses and masked-position logits are checked equal in eval mode.
Timing alternates ours / theirs after warm-up and reports the median of ``repeats`` steps as tokens/s
(real, unpadded tokens), and the peak resident-set growth of one step of each (`common.compare`).
Goal on CPU: ratio >= 3 for BERT-mini and BERT-small.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator

import torch

from bertkit.flops import training_flops

from .below_peak import largest_gemm
from .common import child_json, compare, paired_rows, suite_settings


def make_batch(vocab_size: int, batch: int = 32, seq: int = 128, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.full((batch,), seq)
    short = torch.rand(batch, generator=g) < 0.1
    lengths[short] = torch.randint(8, seq, (int(short.sum()),), generator=g)
    ids = torch.randint(1000, vocab_size, (batch, seq), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids[:, 0] = 101
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, n in enumerate(lengths.tolist()):
        ids[i, n - 1] = 102
        types[i, n // 2 : n] = 1
        k = min(20, max(1, round(0.15 * (n - 2))))
        pos = 1 + torch.randperm(n - 2, generator=g)[:k]
        labels[i, pos] = ids[i, pos]
        ids[i, pos] = 103
    nsp = torch.randint(0, 2, (batch,), generator=g)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": types,
        "labels": labels,
        "next_sentence_label": nsp,
    }


def _step(model, opt, batch, device: str = "cpu", precision: str = "fp32") -> torch.Tensor:
    """One optimizer step (``compare`` times the call); returns the loss."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = model(**batch)
    out.loss.backward()
    opt.step()
    if device == "cuda":  # the kernels are asynchronous: time them, not their launch
        torch.cuda.synchronize()
    return out.loss.detach()


def build_pair(size: str, batch_size: int = 32, seq: int = 128, device: str = "cpu") -> tuple:
    """(ours, theirs, batch, check): the two BertForPreTraining models with the same weights on ``device``,
    one pre-training batch, and their output differences in fp32 eval mode (raises when they differ)."""
    import transformers

    from bertkit.config import BertConfig
    from bertkit.heads.pretraining import BertForPreTraining

    torch.manual_seed(0)
    cfg = BertConfig.preset(size)
    ours = BertForPreTraining(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        theirs = transformers.BertForPreTraining.from_pretrained(tmp, attn_implementation="sdpa")
    ours.to(device)
    theirs.to(device)
    batch = {k: v.to(device) for k, v in make_batch(cfg.vocab_size, batch_size, seq).items()}
    if device == "cuda":  # the equality check in true fp32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    ours.eval()  # no dropout
    theirs.eval()
    with torch.no_grad():
        a = ours(**batch)
        b = theirs(**batch)
        real = batch["labels"] != -100
        check = {
            "max_logit_diff": float((a.prediction_logits - b.prediction_logits[real]).abs().max()),
            "loss_diff": abs(float(a.loss) - float(b.loss)),
            "nsp_diff": float((a.seq_relationship_logits - b.seq_relationship_logits).abs().max()),
        }
    if check["max_logit_diff"] > 1e-3 or check["loss_diff"] > 1e-4 or check["nsp_diff"] > 1e-4:
        raise AssertionError(f"{size}: outputs differ ({check})")
    return ours, theirs, batch, check


def reference_work_flops(config, batch_size: int, seq: int) -> float:
    """FLOPs transformers' step spends (forward + backward = 3 x forward): every position of the padded
    batch through the encoder and full-length attention, and the MLM head dense over all B x T positions.
    Against :func:`bertkit.flops.training_flops` (ours: real tokens, masked rows only) this gives the
    ratio the two would reach at equal FLOP/s: the speed-up from work not done."""
    return training_flops(config, [seq] * batch_size, batch_size * seq)


def bench_size(
    size: str,
    repeats: int = 5,
    warmup: int = 2,
    batch_size: int = 32,
    seq: int = 128,
    device: str = "cpu",
    precision: str = "fp32",
    compile: bool = False,
    ref_precision: str | None = None,
) -> dict:
    """One pre-training step of each side on ``device`` (``precision``: fp32, bf16 autocast, or "auto": what
    ``bertkit.train.precision.choose_precision`` picks on this machine; ``ref_precision``: transformers'
    side, default the same; ``compile``: both models through torch.compile). Outputs are checked equal in
    fp32 eval mode first."""
    import transformers

    from bertkit.train.optim import build_optimizer

    ours, theirs, batch, check = build_pair(size, batch_size, seq, device)
    ours.train()
    theirs.train()
    ref_precision = ref_precision or precision
    chosen = None
    if precision == "auto":  # what a user's `--precision auto` run gets on this machine
        from bertkit.train.precision import choose_precision

        chosen = choose_precision(ours, batch, lambda m, b: m(**b).loss, torch.device(device))
        precision = chosen
    opt_ours = build_optimizer(ours, "adamw", lr=1e-4)
    opt_theirs = build_optimizer(theirs, "adamw", lr=1e-4)
    step_ours, step_theirs = ours, theirs
    if compile:
        step_ours, step_theirs = torch.compile(ours), torch.compile(theirs)
    tokens = int(batch["attention_mask"].sum())
    label = f"pretrain step BERT-{size} ({batch_size}x{seq}, 15% masked, NSP, AdamW"
    if chosen is not None:
        label += f", ours auto->{chosen} vs ref {ref_precision}"
    elif precision != "fp32" or ref_precision != precision:
        label += f", {precision}" + (f" vs ref {ref_precision}" if ref_precision != precision else "")
    label += (", compiled" if compile else "") + ")"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.cuda.reset_peak_memory_stats()
    # alternating rounds, medians and the peak resident-set growth of one step: the shared method
    result = compare(
        label,
        lambda: _step(step_ours, opt_ours, batch, device, precision),
        lambda: _step(step_theirs, opt_theirs, batch, device, ref_precision),
        repeats=repeats,
        warmup=warmup,
        items=tokens,
        unit="tokens",
        goal=3.0 if device == "cpu" else None,
        check=f"logits {check['max_logit_diff']:.1e}, loss {check['loss_diff']:.1e}, nsp {check['nsp_diff']:.1e}",
        memory=device == "cpu",
        extra={
            **check,
            "device": device,
            "precision": precision,
            "ref_precision": ref_precision,
            "precision_auto": chosen is not None,
            "compiled": compile,
            "masked_tokens": int((batch["labels"] != -100).sum()),
            "model_flops_per_call": training_flops(
                ours.config, batch["attention_mask"].sum(1).tolist(), int((batch["labels"] != -100).sum())
            ),
            "ref_work_flops_per_call": reference_work_flops(ours.config, batch_size, seq),
            # ours packs the real tokens of the batch into one GEMM per projection
            "gemm_shape": largest_gemm(
                int(batch["attention_mask"].sum()), ours.config.hidden_size, ours.config.intermediate_size
            ),
            "lengths": batch["attention_mask"].sum(1).tolist(),
            "sequences": batch_size,
            "seq_len": seq,
            "reference_impl": f"transformers {transformers.__version__} BertForPreTraining "
            f"(attn {getattr(theirs.config, '_attn_implementation', '?')})",
        },
    )
    return result


def ours_only(
    size: str,
    repeats: int = 2,
    warmup: int = 2,
    batch_size: int = 32,
    seq: int = 128,
    keep_memory: bool = False,
) -> dict:
    """Our fp32 pre-training step alone (no reference: a BERT-base step of transformers takes minutes on 2
    cores): tokens/s and, through ``model_flops_per_call``, the fraction of the machine's GEMM peak.
    ``keep_memory``: first make malloc keep freed blocks, as bertkit's Trainer does (it is process-wide, so
    :func:`ours_only_in_child` runs it in a process of its own)."""
    import statistics
    import time

    from bertkit.config import BertConfig
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.train.optim import build_optimizer

    if keep_memory:
        from bertkit.kernels.freed_memory import keep_freed_memory

        keep_memory = keep_freed_memory()
    torch.manual_seed(0)
    cfg = BertConfig.preset(size)
    model = BertForPreTraining(cfg).train()
    opt = build_optimizer(model, "adamw", lr=1e-4)
    batch = make_batch(cfg.vocab_size, batch_size, seq)
    for _ in range(warmup):
        _step(model, opt, batch)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _step(model, opt, batch)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    tokens = int(batch["attention_mask"].sum())
    masked = int((batch["labels"] != -100).sum())
    memory = ", freed memory kept as bertkit's Trainer does" if keep_memory else ", glibc's default malloc"
    return {
        "name": f"pretrain step BERT-{size} ({batch_size}x{seq}{memory}), ours only: fraction of GEMM peak",
        "ratio": None,
        "ours_s": t,
        "ours_per_s": tokens / t,
        "unit": "tokens",
        "ours_times": times,
        "precision": "fp32",
        "model_flops_per_call": training_flops(cfg, batch["attention_mask"].sum(1).tolist(), masked),
        "gemm_shape": largest_gemm(tokens, cfg.hidden_size, cfg.intermediate_size),
        "goal": "≥ 50% of fp32 GEMM peak",
    }


def ours_only_in_child(size: str, keep_memory: bool, threads: int | None, batch_size: int, seq: int) -> dict:
    """:func:`ours_only` in a fresh process (a malloc setting, once made, holds for the whole process: the
    rows after it, the reference's included, must not inherit it)."""
    args = [
        "-m",
        "benchmarks.bench_pretrain",
        "--ours-only",
        size,
        "--batch-size",
        str(batch_size),
        "--seq",
        str(seq),
    ]
    args += (["--threads", str(threads)] if threads else []) + (
        ["--keep-freed-memory"] if keep_memory else []
    )
    return child_json(args, drop_env=("BERTKIT_KEEP_FREED_MEMORY",))


def work(sizes: list[str], batch_size: int = 32, seq: int = 128) -> dict:
    """FLOPs per step of each size on the bench's batch: ours (``training_flops``) and transformers'
    (``reference_work_flops``), and their quotient (the ratio at equal FLOP/s)."""
    from bertkit.config import BertConfig

    out = {}
    for size in sizes:
        cfg = BertConfig.preset(size)
        batch = make_batch(cfg.vocab_size, batch_size, seq)
        ours = training_flops(
            cfg, batch["attention_mask"].sum(1).tolist(), int((batch["labels"] != -100).sum())
        )
        ref = reference_work_flops(cfg, batch_size, seq)
        out[size] = {"ours_flops": ours, "transformers_flops": ref, "work_ratio": ref / ours}
    return out


def run(args=None) -> Iterator[dict]:
    """One row per size (and precision), each as soon as it is measured, so a run stopped by a time limit keeps
    the rows it finished. ``args``: namespace/dict with sizes, repeats, warmup, threads, batch_size, seq,
    ours_only_sizes and ``mixed``: which rows a CPU with native bf16 adds per size, "auto"
    (ours ``--precision auto`` vs transformers fp32) and "bf16" (both sides bf16), in that order."""
    ns = suite_settings(
        dict(sizes=["mini", "small"], repeats=5, warmup=2, threads=None, batch_size=32, seq=128,
             ours_only_sizes=["base"], mixed=["auto", "bf16"]),
        args,
    )  # fmt: skip
    if not (yield from paired_rows(bench_size, ns, "pretrain step")):
        return
    for s in ns.ours_only_sizes:  # glibc's default (as the paired rows above) and as the Trainer runs it
        for keep in (False, True):
            yield ours_only_in_child(s, keep, ns.threads, ns.batch_size, ns.seq)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", default=["mini", "small"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument(
        "--work-only",
        action="store_true",
        help="print each size's FLOPs per step, ours and transformers', for the bench's batch (no timing)",
    )
    p.add_argument("--ours-only", dest="ours_only", default=None, help="time only our step of this size")
    p.add_argument("--keep-freed-memory", action="store_true", help="with --ours-only: as bertkit's Trainer")
    args = p.parse_args(argv)
    if args.ours_only:
        if args.threads:
            torch.set_num_threads(args.threads)
        print(json.dumps(ours_only(args.ours_only, batch_size=args.batch_size, seq=args.seq,
                                   keep_memory=args.keep_freed_memory)), flush=True)  # fmt: skip
        return
    if args.work_only:
        print(json.dumps(work(args.sizes, args.batch_size, args.seq), indent=2))
        return
    for row in run(args):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
