"""Where the time of one pre-training step goes, per op and per kind of op (torch.profiler).

    .venv/bin/python -m benchmarks.profile_step [--size small] [--steps 3] [--threads 2]
        [--precision fp32|bf16] [--side ours|transformers] [--out bench/profile-small.json]

The step is benchmarks.bench_pretrain's (32 x 128, 15% masked, NSP, AdamW, training mode). The output file
holds the machine, the command and commit, the step time, each op's self CPU time per step, and the ops
grouped by kind (GEMMs, attention, element-wise, dropout masks, LayerNorm, copies and concatenations,
embeddings, optimizer, other), with the share of the step each takes. lab/notes/notes-perf.md quotes it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# op name -> kind (first matching rule wins; matched against the aten/mkldnn op name)
KINDS = (
    (
        "gemm",
        ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "aten::linear", "aten::_addmm_activation"),
    ),
    (
        "attention",
        (
            "aten::bmm",
            "aten::_softmax",
            "aten::_softmax_backward_data",
            "scaled_dot_product",
            "aten::baddbmm",
        ),
    ),
    (
        "dropout",
        ("aten::random_", "aten::bitwise_and", "aten::ge", "aten::bernoulli", "aten::native_dropout"),
    ),
    ("layernorm", ("layer_norm",)),
    ("activation", ("gelu", "aten::tanh")),
    ("loss", ("log_softmax", "aten::nll_loss", "aten::exp_", "aten::gather", "aten::cross_entropy")),
    ("embedding", ("embedding",)),
    ("optimizer", ("adam", "aten::_foreach", "zero_grad")),
    (
        "copy/cat",
        (
            "aten::copy_",
            "aten::cat",
            "aten::index_select",
            "aten::index_copy",
            "aten::clone",
            "aten::contiguous",
        ),
    ),
    ("alloc/fill", ("aten::fill_", "aten::zero_", "aten::empty")),
    (
        "element-wise",
        ("aten::add", "aten::mul", "aten::sum", "aten::div", "aten::sub", "aten::masked_fill", "aten::where"),
    ),
)


def kind_of(name: str) -> str:
    for kind, keys in KINDS:
        if any(k in name for k in keys):
            return kind
    return "other"


def profile(size: str, steps: int, precision: str, side: str) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from benchmarks.bench_pretrain import _step, build_pair
    from bertkit.train.optim import build_optimizer

    ours, theirs, batch, _ = build_pair(size)
    model = ours if side == "ours" else theirs
    model.train()
    opt = build_optimizer(model, "adamw", lr=1e-4)
    for _ in range(2):  # warm-up: kernel choice, allocator
        _step(model, opt, batch, precision=precision)
    t0 = time.perf_counter()
    for _ in range(steps):
        _step(model, opt, batch, precision=precision)
    step_s = (time.perf_counter() - t0) / steps
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            _step(model, opt, batch, precision=precision)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    ops = sorted(
        (
            {
                "op": e.key,
                "kind": kind_of(e.key),
                "ms_per_step": e.self_cpu_time_total / 1e3 / steps,
                "calls_per_step": e.count / steps,
                "share": e.self_cpu_time_total / total,
            }
            for e in events
        ),
        key=lambda r: -r["ms_per_step"],
    )
    kinds: dict[str, float] = {}
    for r in ops:
        kinds[r["kind"]] = kinds.get(r["kind"], 0.0) + r["share"]
    return {
        "size": size,
        "side": side,
        "precision": precision,
        "steps": steps,
        "step_s_unprofiled": step_s,
        "profiled_self_cpu_ms_per_step": total / 1e3 / steps,
        "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "ops": ops[:40],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--side", choices=["ours", "transformers"], default="ours")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    import bertkit  # noqa: F401  (the process settings users get, before torch's pool starts)
    from bertkit.io import atomic_write_json

    from .common import environment, pin_threads

    pin_threads(args.threads)
    result = profile(args.size, args.steps, args.precision, args.side)
    result["environment"] = environment()
    result["command"] = "python -m benchmarks.profile_step " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    out = args.out or ROOT / "bench" / f"profile-{args.size}-{args.side}-{args.precision}.json"
    atomic_write_json(out, result)
    print(
        f"BERT-{args.size} {args.side} {args.precision}: {result['step_s_unprofiled']:.3f} s/step unprofiled"
    )
    for kind, share in result["kinds"].items():
        print(f"  {kind:<14} {share:6.1%}")
    for r in result["ops"][:15]:
        print(
            f"  {r['op']:<40} {r['ms_per_step']:9.1f} ms/step  {r['calls_per_step']:6.1f} calls  {r['share']:6.1%}"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
