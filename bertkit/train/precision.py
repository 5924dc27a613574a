"""Mixed precision for the Trainer: which autocast context and whether a gradient scaler.

``fp32``: no autocast. ``bf16``: autocast to bfloat16 (CPU or GPU; bf16 has fp32's range, so no scaler).
``fp16``: autocast to float16 on CUDA with a :class:`torch.amp.GradScaler` (float16's small range
underflows small gradients: the scaler multiplies the loss before backward, unscales before clipping, and
skips a step whose gradients overflowed while lowering the scale). fp16 on a CPU is refused.
``auto``: bf16 where it measured faster on this machine for this model and batch AND its loss agreed with
fp32's, else fp32 (:func:`choose_precision`, made at the first batch and cached per machine); a resumed run
takes the precision its checkpoint recorded instead (:func:`resume_precision`).
"""

from __future__ import annotations

import contextlib
import logging

import torch

logger = logging.getLogger("bertkit")

PRECISIONS = ("fp32", "bf16", "fp16", "auto")


def check_precision(precision: str, device: torch.device) -> None:
    """Raise ValueError for an unknown precision or fp16 off CUDA."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs a CUDA GPU (it uses a grad scaler); on CPU use bf16 or fp32")


def autocast(precision: str, device: torch.device):
    """The context the forward pass runs under ("auto" not yet resolved by :func:`choose_precision`, e.g.
    an evaluation before the first training batch: fp32)."""
    if precision in ("fp32", "auto"):
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def make_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 on CUDA, else None (fp32/bf16 need none)."""
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


def _cpu_has_bf16() -> bool:
    """Native bf16 GEMMs (AVX512-BF16 or AMX) that oneDNN uses; elsewhere bf16 is emulated and slower."""
    from bertkit.tuning import cpu_info

    flags = set(cpu_info()["flags"])
    return bool(flags & {"avx512_bf16", "amx_bf16"}) and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _loss(out) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


def _shapes(batch, prefix: str = "") -> list:
    """[(key, shape)] of a batch's tensors, nested dicts included (a bi-encoder batch holds one per side)."""
    if not isinstance(batch, dict):
        return []
    out = []
    for k, v in batch.items():
        if isinstance(v, dict):
            out += _shapes(v, f"{prefix}{k}.")
        elif isinstance(v, torch.Tensor):
            out.append((f"{prefix}{k}", tuple(v.shape)))
    return sorted(out)


def choose_precision(model: torch.nn.Module, batch, loss_fn, device: torch.device) -> str:
    """ "bf16" when bf16 autocast is faster here for ``model`` on batches shaped like ``batch`` and its loss
    agrees with fp32's, else "fp32".

    On a CPU with native bf16 (AVX512-BF16 or AMX): one eval-mode loss in each precision must agree within
    1% (+1e-3), then forward + backward of each are timed alternately (medians of 3 rounds); bf16 is chosen
    when at least 10% faster. The measurement leaves no trace in training: the random number generator's
    state is restored and the gradients cleared. Off CPU, or without native bf16, "fp32" (nothing is
    measured; pass bf16 yourself on a GPU). Cached per machine, model class, size and batch shape
    (:mod:`bertkit.tuning`); an environment variable overrides it (:mod:`bertkit.settings`)."""
    from bertkit.settings import PRECISION
    from bertkit.tuning import choose, time_alternating

    if device.type != "cpu" or not _cpu_has_bf16():
        return "fp32"
    shapes = _shapes(batch)
    size = sum(p.numel() for p in model.parameters())
    name = f"precision:{type(model).__name__}:{size}:{shapes}"

    def measure() -> tuple[str, dict]:
        was_training = model.training
        with torch.random.fork_rng(devices=[]):
            try:
                model.eval()
                with torch.no_grad():
                    fp32 = float(_loss(loss_fn(model, batch)))
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        bf16 = float(_loss(loss_fn(model, batch)))
                details: dict = {"loss_fp32": fp32, "loss_bf16": bf16}
                if not abs(bf16 - fp32) <= 0.01 * abs(fp32) + 1e-3:
                    return "fp32", details | {"reason": "the bf16 loss disagrees"}
                model.train(was_training)

                def step(dtype_on: bool) -> None:
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype_on):
                        loss = _loss(loss_fn(model, batch))
                    loss.backward()

                t = time_alternating({"fp32": lambda: step(False), "bf16": lambda: step(True)}, rounds=3)
            finally:
                model.train(was_training)
                model.zero_grad(set_to_none=True)
        details |= {k + "_ms": round(v * 1e3, 1) for k, v in t.items()}
        return ("bf16" if t["bf16"] < 0.9 * t["fp32"] else "fp32"), details

    return choose(name, measure, override=PRECISION)


def resume_precision(recorded: object) -> str | None:
    """What ``--precision auto`` resolves to in a run resumed from a checkpoint that recorded ``recorded``
    (the precision the run computed in, "fp32" or "bf16"): that one, not a choice made afresh for this
    machine (fp32 and bf16 give other bits, and a cleared cache or another load can tip the measurement).
    The environment's override (:mod:`bertkit.settings`) wins, with a warning when it disagrees. None: nothing
    usable was recorded (a checkpoint from before this was, or one written before its first batch), so the
    first batch chooses as in a new run."""
    from bertkit.settings import PRECISION

    if recorded not in ("fp32", "bf16"):
        return None
    pinned = PRECISION.value()
    if pinned is not None and pinned != recorded:
        logger.warning(
            "the checkpoint was computed in %s; %s=%s keeps %s, so this resume is not bitwise the run it continues",
            recorded,
            PRECISION.name,
            PRECISION.raw(),
            pinned,
        )
        return pinned
    logger.info("precision %s, as the checkpoint was written (--precision auto not re-chosen)", recorded)
    return str(recorded)
