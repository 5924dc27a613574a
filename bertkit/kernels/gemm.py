"""``linear``: y = act(x W^T + b), on oneDNN's fp32 GEMM where that measured faster on this machine.

oneDNN (``torch.ops.mkldnn._linear_pointwise``) ran the fp32 GEMMs 2-4x faster than the MKL path
``F.linear`` takes on AMD EPYC (MKL picks a generic kernel there), and bought nothing on an Intel Xeon;
which one a process uses is chosen per machine (:func:`choose_linear`, :mod:`bertkit.tuning`; an environment variable
overrides it: :mod:`bertkit.settings`). Results agree with ``F.linear`` to float rounding (~1e-6 relative).

The backends (:data:`BACKENDS`):

- "torch": ``F.linear`` forward and backward.
- "onednn_fwd": oneDNN forward, the backward's two GEMMs on ``torch.mm`` (MKL). The backward multiplies by
  transposed operands, which MKL reads in place while oneDNN's path copies one of them row-major; on a
  2-core Intel Xeon oneDNN's weight gradient of a 768x3072 feed-forward took 2-5x torch.mm's
  (docs/perf/gemm-backward.json). With the backward of "torch", this backend can only differ from it by its
  forward, which is what the per-machine measurement compares.
- "onednn": oneDNN forward and backward. Kept so a run recorded with it resumes bitwise
  (:func:`resume_backend`) and for the setting that pins oneDNN (:mod:`bertkit.settings`); the measurement
  takes it only where its backward wins too.

oneDNN builds and keeps a kernel per GEMM shape; with packed batches the row count changes every batch,
so rows are padded up to a few bucket sizes (:func:`bucket`); without them the process grew ~2 MB per
new shape.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import settings
from ..tuning import decide, recorded_choice, time_alternating
from .state import fast_ok

logger = logging.getLogger(__name__)

# activations oneDNN fuses into the GEMM (the ACT2FN names of bertkit.model): (attr, algorithm)
_ONEDNN_ACTS = {"gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "gelu_pytorch_tanh": ("gelu", "tanh")}

_ACTS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "tanh": torch.tanh,
}

BACKENDS = ("torch", "onednn_fwd", "onednn")

_UNSET = object()
_op = _UNSET  # the oneDNN op once chosen, None for F.linear
_name = "torch"  # the backend _op stands for (one of BACKENDS)


def onednn_op():
    """oneDNN's linear op when this build has a working one, else None."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        op = torch.ops.mkldnn._linear_pointwise
        x = torch.ones(2, 3)
        if not torch.allclose(
            op(x, torch.ones(4, 3), torch.zeros(4), "none", [], ""), torch.full((2, 4), 3.0)
        ):
            return None
        return op
    except Exception:  # no oneDNN kernel on this build/CPU: F.linear it is
        return None


def _set(name: str) -> None:
    """Use backend ``name`` (one of :data:`BACKENDS`; torch's when this build lacks oneDNN's kernel)."""
    global _op, _name
    _op = None if name == "torch" else onednn_op()
    _name = name if _op is not None else "torch"


def _backend():
    """The oneDNN op if this machine's choice is a oneDNN backend, else None (chosen once, at first use)."""
    if _op is _UNSET:
        _set(choose_linear())
    return _op


def onednn_in_use() -> bool:
    """Whether fp32 GEMMs run on oneDNN in this process (which pads their rows to :func:`bucket` sizes)."""
    return _backend() is not None


def use_backend(name: str | None) -> None:
    """Force the GEMM backend for this process: one of :data:`BACKENDS`, or None to choose again at next
    use."""
    global _op
    if name is None:
        _op = _UNSET
    elif name in BACKENDS:
        _set(name)
    else:
        raise ValueError(f"GEMM backend must be one of {', '.join(BACKENDS)} or None, got {name!r}")


def backend_name() -> str:
    """The fp32 GEMM backend this process uses, one of :data:`BACKENDS` (chosen at first use)."""
    _backend()
    return _name


def backend_chosen() -> str | None:
    """The fp32 GEMM backend this process has chosen, one of :data:`BACKENDS`; None before its first use
    (the question measures nothing)."""
    return None if _op is _UNSET else backend_name()


def resume_backend(recorded: str | None, source: str = "the checkpoint") -> None:
    """Use the GEMM backend a training run recorded (``recorded``, from :func:`backend_name`, read from
    ``source``: its checkpoint or run config) instead of choosing one for this machine.

    The two backends round differently, and where they measure alike the per-machine choice can fall either
    way in another process (a cleared or disabled cache, a fresh container): a resumed run then computes
    other bits than the run it continues. So the recorded backend wins over this machine's recorded choice
    (:func:`bertkit.tuning.recorded_choice`; a warning when they differ) and nothing is measured. A backend
    pinned in the environment (:mod:`bertkit.settings`) that disagrees wins, and so does this build when it
    lacks oneDNN's kernel; both with a warning that the resume is not bitwise."""
    if recorded not in BACKENDS:
        return  # a checkpoint from before this was recorded, or an unknown name: the machine's choice
    if _op is not _UNSET and recorded == backend_name():
        return
    if settings.gemm_backend_override() is not None:
        if choose_linear() != recorded:
            logger.warning(
                "%s was written with GEMM backend %s; %s=%s keeps %s, so this resume "
                "is not bitwise the run it continues",
                source,
                recorded,
                settings.ONEDNN.name,
                settings.ONEDNN.raw(),
                choose_linear(),
            )
        return
    if recorded != "torch" and onednn_op() is None:
        logger.warning(
            "%s was written with GEMM backend %s, which this torch build lacks: resuming on "
            "torch (F.linear), not bitwise the run it continues",
            source,
            recorded,
        )
        use_backend("torch")
        return
    machine = recorded_choice("linear")
    if machine is not None and machine != recorded:
        logger.warning(
            "GEMM backend %s, as %s was written, not %s, this machine's recorded choice (bertkit tune --show)",
            recorded,
            source,
            machine,
        )
    else:
        logger.info("GEMM backend %s, as %s was written (not re-chosen for this machine)", recorded, source)
    use_backend(recorded)


def bucket(rows: int) -> int:
    """``rows`` rounded up to one of 16 sizes per power of two (at most 6.25% more, ~3% on average; powers of
    two up to 64). Every padded row is GEMM work: with 8 sizes per power of two (up to 12.5%; a train-embed
    batch's few thousand packed rows rounded to multiples of 512) train-embed ran 2.5% slower
    (docs/perf/ab-train-embed.json); 16 keep the shapes oneDNN caches to 135 up to 16k rows."""
    if rows <= 64:
        return 1 << max(rows - 1, 0).bit_length()
    step = 1 << (rows.bit_length() - 5)
    return -(-rows // step) * step


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    return x if x.shape[0] == rows else torch.cat([x, x.new_zeros(rows - x.shape[0], x.shape[1])])


def _dnn(op, x: Tensor, weight: Tensor, bias: Tensor | None, attr: str = "none", algo: str = "") -> Tensor:
    """x [..., in] @ weight[out, in]^T + bias on oneDNN, rows padded to their bucket -> [..., out]."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    rows = x2.shape[0]
    out = op(_pad_rows(x2, bucket(rows)), weight, bias, attr, [], algo)[:rows]
    return out.view(*shape[:-1], weight.shape[0])


class _DnnLinear(torch.autograd.Function):
    """y = x W^T + b with a oneDNN GEMM forward; the backward's GEMMs on oneDNN too, or on ``torch.mm``
    when ``mm_backward`` (backend "onednn_fwd")."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, op, mm_backward: bool = False) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        ctx.op = op
        ctx.mm_backward = mm_backward
        return _dnn(op, x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        n = grad.numel() // grad.shape[-1]
        backward = _mm_backward if ctx.mm_backward else _dnn_backward
        grad_x, grad_w, grad_b = backward(ctx.op, ctx.needs_input_grad, ctx.has_bias, x, weight, grad, n)
        return grad_x, grad_w, grad_b, None, None


def _mm_backward(
    op, needs: tuple[bool, ...], has_bias: bool, x: Tensor, weight: Tensor, grad: Tensor, n: int
):
    """The gradients of x [..., in], weight [out, in] and bias [out] from grad [..., out] (``n`` rows) on
    ``torch.mm``, as F.linear's backward computes them: MKL reads the transposed operands in place, no row
    padding and no copies."""
    g2 = grad.reshape(n, grad.shape[-1])
    grad_x = g2.mm(weight).view(*grad.shape[:-1], weight.shape[1]) if needs[0] else None
    grad_w = g2.t().mm(x.reshape(n, x.shape[-1])) if needs[1] else None
    grad_b = g2.sum(0) if has_bias and needs[2] else None
    return grad_x, grad_w, grad_b


def _dnn_backward(
    op, needs: tuple[bool, ...], has_bias: bool, x: Tensor, weight: Tensor, grad: Tensor, n: int
):
    """:func:`_mm_backward` on oneDNN's GEMM (backend "onednn"), rows padded to their bucket."""
    # the gradient's rows padded to the GEMM bucket once, for both GEMMs (for the MLM decoder it is a
    # [rows, vocab] tensor: padding it twice cost a second large copy)
    g2 = _pad_rows(grad.contiguous().view(n, grad.shape[-1]), bucket(n))
    grad_x = grad_w = grad_b = None
    if needs[0]:
        # oneDNN reads the transposed weight in place (a strided view): no [in, out] copy
        grad_x = op(g2, weight.t(), None, "none", [], "")[:n].view(*grad.shape[:-1], weight.shape[1])
    if needs[1]:
        # padded like the gradient: zero rows add nothing to the sum over rows
        x2 = _pad_rows(x.reshape(n, x.shape[-1]), g2.shape[0])
        # grad_w = g^T x sums over rows: oneDNN wants its first operand row-major, and reads the second
        # in place when strided. Copying the narrower of the two transposed (and reading the wider
        # in place) halves the time on the feed-forward and MLM-decoder shapes against copying both.
        if g2.shape[1] >= x2.shape[1]:
            grad_w = op(x2.t().contiguous(), g2.t(), None, "none", [], "").t()
        else:
            grad_w = op(g2.t().contiguous(), x2.t(), None, "none", [], "")
    if has_bias and needs[2]:
        grad_b = g2.sum(0)  # the padding rows are zeros
    return grad_x, grad_w, grad_b


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, act: str | None = None) -> Tensor:
    """``act(x W^T + b)``: x [..., in], weight [out, in], bias [out] -> [..., out].

    ``act``: None, "gelu", "gelu_new", "gelu_pytorch_tanh", "relu" or "tanh". On oneDNN for fp32 CPU tensors
    when this machine's choice is oneDNN (the activation fused into the GEMM when no gradient is needed),
    else ``F.linear``."""
    op = _backend() if fast_ok(x) and x.numel() > 0 else None
    if op is not None and (weight.dtype != torch.float32 or torch.is_autocast_enabled("cpu")):
        op = None
    if op is None:
        out = F.linear(x, weight, bias)
    elif torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        out = _DnnLinear.apply(x.contiguous(), weight, bias, op, _name == "onednn_fwd")
    elif act in _ONEDNN_ACTS:
        return _dnn(op, x.contiguous(), weight, bias, *_ONEDNN_ACTS[act])
    else:
        out = _dnn(op, x.contiguous(), weight, bias)
    return out if act is None else _ACTS[act](out)


def _measure_linear() -> tuple[str, dict[str, Any]]:
    # the first use may come inside inference_mode, whose tensors the backward's GEMMs must not meet
    with torch.inference_mode(False), torch.no_grad():
        return _measure_linear_grad()


# (rows, in, out) the per-machine measurement times: a feed-forward GEMM and its way back (BERT-base and
# ModernBERT-base widths), and an MLM decoder onto a 30k vocabulary. Each counts alike (geometric mean of the
# per-shape ratios), so the vocabulary GEMM, the largest, does not decide alone.
MEASURE_SHAPES: tuple[tuple[int, int, int], ...] = ((512, 768, 3072), (512, 3072, 768), (128, 768, 30522))
# a oneDNN part only when clearly faster: F.linear is the plain path (no row padding, no custom autograd)
MARGIN = 0.95
# what a cached "linear" entry must carry to count (older entries timed one shape, fwd+bwd together, and
# are measured again)
MEASURE_VERSION = 2


def pick_backend(ratios: dict[str, float]) -> str:
    """The backend (one of :data:`BACKENDS`) from oneDNN's time over torch's, ``ratios["forward"]`` and
    ``ratios["backward"]`` (and ``ratios["step"]``, forward and backward together): oneDNN does each part it
    is clearly faster at; a oneDNN backward needs its forward (there is no torch-forward oneDNN-backward
    backend), so it is taken only where oneDNN is clearly faster over the whole step."""
    fwd, bwd = ratios["forward"] < MARGIN, ratios["backward"] < MARGIN
    if fwd and bwd:
        return "onednn"
    if fwd:
        return "onednn_fwd"
    if bwd and ratios["step"] < MARGIN:
        return "onednn"
    return "torch"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _time_shape(op, rows: int, n_in: int, n_out: int, g: torch.Generator) -> dict[str, float]:
    """Median seconds of each backend's forward and backward on x [rows, n_in], weight [n_out, n_in]."""
    x, w = torch.randn(rows, n_in, generator=g), torch.randn(n_out, n_in, generator=g)
    b, grad = torch.zeros(n_out), torch.randn(rows, n_out, generator=g)
    needs = (True, True, True)
    return time_alternating(
        {
            "fwd_onednn": lambda: _dnn(op, x, w, b),
            "fwd_torch": lambda: F.linear(x, w, b),
            "bwd_onednn": lambda: _dnn_backward(op, needs, True, x, w, grad, rows),
            "bwd_torch": lambda: _mm_backward(op, needs, True, x, w, grad, rows),
        },
        rounds=3,
        warmup=1,
    )


def _measure_linear_grad() -> tuple[str, dict[str, Any]]:
    """oneDNN vs torch on :data:`MEASURE_SHAPES`, the forward and the backward timed apart (~2 s idle on a
    2-core Xeon): -> (:func:`pick_backend`'s choice, the ratios and the ms per shape and part)."""
    op = onednn_op()
    if op is None:
        return "torch", {"reason": "no working oneDNN linear in this torch build"}
    g = torch.Generator().manual_seed(0)
    ratios: dict[str, list[float]] = {"forward": [], "backward": [], "step": []}
    ms: dict[str, dict[str, float]] = {}
    for rows, n_in, n_out in MEASURE_SHAPES:
        t = _time_shape(op, rows, n_in, n_out, g)
        ratios["forward"].append(t["fwd_onednn"] / t["fwd_torch"])
        ratios["backward"].append(t["bwd_onednn"] / t["bwd_torch"])
        ratios["step"].append((t["fwd_onednn"] + t["bwd_onednn"]) / (t["fwd_torch"] + t["bwd_torch"]))
        ms[f"{rows}x{n_in}->{n_out}"] = {k: round(v * 1e3, 3) for k, v in t.items()}
    summary = {k: round(_geomean(v), 3) for k, v in ratios.items()}
    details = {"version": MEASURE_VERSION, "onednn_over_torch": summary, "ms": ms}
    return pick_backend(summary), details


def choose_linear() -> str:
    """The fp32 GEMM backend of :func:`bertkit.kernels.linear` on this machine: "onednn" or "torch"."""
    return decide_linear()[0]


def decide_linear(force: bool = False) -> tuple[str, str]:
    """:func:`choose_linear` and where the choice came from (:func:`bertkit.tuning.decide`; ``force``:
    measured again even when cached)."""
    return decide(
        "linear",
        _measure_linear,
        override=settings.ONEDNN,
        force=force,
        current=lambda entry: _measured_now(entry) and entry["choice"] in BACKENDS,
    )


def _measured_now(entry: dict[str, Any]) -> bool:
    """Whether a cached "linear" entry was measured as :func:`_measure_linear_grad` measures now."""
    details = entry.get("details")
    return isinstance(details, dict) and (details.get("version") == MEASURE_VERSION or "reason" in details)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same names) whose forward is :func:`linear`: x [..., in] -> [..., out].

    ``act`` (one of :func:`linear`'s names, or None) is applied to the output, fused into the GEMM where
    oneDNN can; the module then computes ``act(x W^T + b)``. Under the reference ops, torch.compile or
    tracing it is ``F.linear`` (then ``act``), so an export or a quantiser sees an ordinary Linear."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        act: str | None = None,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if act is not None and act not in _ACTS:
            raise ValueError(f"act must be one of {', '.join(_ACTS)} or None, got {act!r}")
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, act=self.act)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", act={self.act}" if self.act else "")
