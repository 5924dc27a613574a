"""On a GPU: bertkit with packing (attention per group of equal-length sequences, the CPU path) against the
padded batch (the GPU path since packing became CPU-only), and transformers, in alternating rounds.

    python -m benchmarks.ab_packing_gpu [--out packing-gpu.json]

Two cases, bf16 autocast, medians of 6 rounds after one warm-up round: the BERT-base pre-training step of
``benchmarks.bench_pretrain`` (128 x 128, 15% masked, NSP, AdamW; both models the same weights) and BERT-base
inference on 20 batches of 32 sequences of 8 to 64 tokens (short-text serving). Skips without CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _timed(fn, n: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n


def _alternate(sides: dict, call, rounds: int = 7) -> dict[str, float]:
    """Median seconds of ``call(side)`` per side, the sides in turn each round, the first round dropped."""
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(rounds):
        for k, side in sides.items():
            t = call(side)
            if r > 0:
                times[k].append(t)
    return {k: statistics.median(v) for k, v in times.items()}


def run() -> dict:
    import bertkit.kernels as kernels
    from bertkit.kernels.packing import Packing
    from bertkit.train.optim import build_optimizer

    from .bench_pretrain import _step, build_pair

    padded = kernels.packing_for  # the GPU path: no packing on CUDA

    def packed(mask):  # the CPU path, forced on the GPU
        return None if mask is None or bool(mask.all()) else Packing(mask.bool())

    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    ours, theirs, batch, _ = build_pair("base", 128, 128, "cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    ours.train()
    theirs.train()
    opt_ours, opt_theirs = build_optimizer(ours, "adamw", lr=1e-4), build_optimizer(theirs, "adamw", lr=1e-4)

    def step(side) -> float:
        kernels.packing_for, model, opt = side
        return _timed(lambda: _step(model, opt, batch, "cuda", "bf16"), 5)

    sides = {"ours_packed": (packed, ours, opt_ours), "ours_padded": (padded, ours, opt_ours),
             "theirs": (padded, theirs, opt_theirs)}  # fmt: skip
    res["pretrain_base_128x128_bf16_s_per_step"] = _alternate(sides, step)

    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(20):
        lengths = torch.randint(8, 65, (32,), generator=g)
        mask = (torch.arange(int(lengths.max()))[None] < lengths[:, None]).long()
        ids = torch.randint(1000, 30000, mask.shape, generator=g) * mask
        batches.append((ids.cuda(), mask.cuda()))

    def infer(side) -> float:
        kernels.packing_for, encoder = side

        def all_batches() -> None:
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                for ids, mask in batches:
                    encoder(ids, attention_mask=mask)

        return _timed(all_batches, 1) / len(batches)

    encoders = {"ours_packed": (packed, ours.bert.eval()), "ours_padded": (padded, ours.bert.eval()),
                "theirs": (padded, theirs.bert.eval())}  # fmt: skip
    res["infer_base_b32_len8to64_bf16_s_per_batch"] = _alternate(encoders, infer)
    kernels.packing_for = padded
    return res


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="write the result JSON here too")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device on this machine"}))
        return
    res = run()
    print(json.dumps(res), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
