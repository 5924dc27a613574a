"""GPU pre-training throughput and model-FLOPs utilisation (MFU): BERT-base at seq 128 in bf16 autocast,
SDPA (flash) attention, bertkit's sparse MLM head and fused AdamW, against transformers'
``BertForPreTraining`` (SDPA) on the same weights, batch and optimizer.

Run on a machine with CUDA:
``.venv/bin/python -m benchmarks.bench_gpu [--size base] [--batch-size 128] [--seq 128] [--repeats 10]
[--compile] [--peak-tflops T]`` (``make bench`` runs it as the ``gpu`` suite; without a CUDA device it
reports a skipped row). Goal (issue 5): >= 40% MFU, about 5,700 sequences/s on one H100.

MFU = model FLOPs per step / step time / the device's dense bf16 peak. Model FLOPs
(:func:`bertkit.flops.training_flops`) are the work a step needs, the same number for both sides: the GEMMs
of every real token (padding excluded), attention over each sequence's real length, the pooler and NSP layer,
and the MLM head on the masked positions only; backward counts twice the forward. Element-wise work
(LayerNorm, GELU, softmax, the optimizer) is not counted, as is usual. transformers also spends
FLOPs on padding and on the MLM decoder at unmasked positions; they are not model FLOPs.
"""

from __future__ import annotations

import argparse
import json

import torch

from bertkit.flops import peak_tflops, training_flops


def run(args=None) -> list[dict]:
    """One row: the GPU pre-training step, or a skipped row without CUDA (``args``: see :func:`main`)."""
    ns = argparse.Namespace(
        size="base", batch_size=128, seq=128, repeats=10, warmup=3, compile=False, peak_tflops=None
    )
    if args is not None:
        for k, v in (vars(args) if not isinstance(args, dict) else args).items():
            if v is not None and hasattr(ns, k):
                setattr(ns, k, v)
    name = f"GPU pretrain step BERT-{ns.size} ({ns.batch_size}x{ns.seq}, bf16)"
    if not torch.cuda.is_available():
        return [{"name": name, "skipped": "no CUDA device on this machine"}]
    try:
        import transformers  # noqa: F401
    except ImportError:
        return [{"name": name, "skipped": "transformers is not installed"}]
    from bertkit.config import BertConfig

    from .bench_pretrain import bench_size

    row = bench_size(
        ns.size,
        ns.repeats,
        ns.warmup,
        ns.batch_size,
        ns.seq,
        device="cuda",
        precision="bf16",
        compile=ns.compile,
    )
    flops = training_flops(BertConfig.preset(ns.size), row["lengths"], row["masked_tokens"])
    device_name = torch.cuda.get_device_name()
    peak = ns.peak_tflops or peak_tflops(device_name)
    row.update(
        device_name=device_name,
        model_flops_per_step=flops,
        ours_sequences_per_s=ns.batch_size / row["ours_s"],
        ref_sequences_per_s=ns.batch_size / row["ref_s"],
        peak_gpu_mb_both_models=torch.cuda.max_memory_allocated() / 2**20,
    )
    if peak:
        row.update(
            peak_tflops=peak,
            ours_mfu=flops / row["ours_s"] / (peak * 1e12),
            ref_mfu=flops / row["ref_s"] / (peak * 1e12),
            goal_mfu=0.40,
        )
        row["meets_goal"] = row["ours_mfu"] >= 0.40
    return [row]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="base")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=128)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="both models through torch.compile")
    p.add_argument(
        "--peak-tflops", dest="peak_tflops", type=float, default=None, help="the device's bf16 peak"
    )
    for row in run(p.parse_args(argv)):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
