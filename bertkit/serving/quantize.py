"""``bertkit serve --int8``: dynamic int8 quantisation (PyTorch) of the model's own Linear layers, CPU only.

:func:`int8_static` copies the model and swaps each of its Linear modules for a dynamically quantised one
(``torch.ao.nn.quantized.dynamic.Linear``: weights int8, activations quantised per call at run time); the
copy runs the model's own forward. So the int8 model packs a padded batch's real tokens as the float path
does (:mod:`bertkit.kernels.packing`): no int8 GEMM is spent on padding, which, run over the padded batch,
had made ``serve --int8`` slower than float. A Linear whose weight is tied to another parameter (the MLM
decoder, which is the word embeddings) stays float. The outputs are the model's (``out[0]``, ...).

Which int8 GEMM runs is fixed when the weights are packed: PyTorch's quantised engine at that moment
(``fbgemm``, ``onednn``, or ``x86``, which packs dynamic Linear weights for fbgemm). The packed weights
keep their kernel afterwards, whatever the process's engine is later. ``engine="auto"`` packs for oneDNN
on a CPU with AMX int8 tiles (oneDNN's int8 GEMM uses them; fbgemm does not) and keeps PyTorch's default
elsewhere. On the Xeon with AMX this was measured on (``benchmarks/bench_int8.py``, docs/guide/serving.md),
oneDNN's int8 encoder ran well ahead of fbgemm's for the same outputs bound.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..kernels import Linear
from ..kernels.gemm import _ACTS
from .int8_engines import ENGINES


def choose_engine(
    requested: str = "auto", flags: set[str] | None = None, supported: list[str] | None = None
) -> str:
    """The quantised engine to pack the int8 weights for.

    ``requested``: one of ``ENGINES``; ``flags``: the CPU's ISA flags (default: this CPU's);
    ``supported``: the engines this torch build has (default: ``torch.backends.quantized.supported_engines``).
    """
    supported = list(torch.backends.quantized.supported_engines if supported is None else supported)
    if requested not in ENGINES:
        raise UserError(f"--int8-engine must be one of {', '.join(ENGINES)}, got {requested!r}")
    if requested != "auto":
        if requested not in supported:
            raise UserError(
                f"--int8-engine {requested}: this torch build has only {', '.join(e for e in supported if e != 'none')}"
            )
        return requested
    if flags is None:
        from ..tuning import cpu_info

        flags = set(cpu_info()["flags"])
    if "onednn" in supported and "amx_int8" in flags:
        return "onednn"
    for engine in ("x86", "fbgemm", "qnnpack"):
        if engine in supported:
            return engine
    raise UserError("--int8: this torch build has no quantised CPU engine (torch.backends.quantized)")


class Int8Linear(nn.Module):
    """A dynamically quantised Linear, then the float module's fused activation (if any): [..., in] -> [..., out]."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
        from torch.ao.quantization import default_dynamic_qconfig

        plain = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
        plain.load_state_dict(linear.state_dict())  # from_float takes exactly nn.Linear, not a subclass
        plain.qconfig = default_dynamic_qconfig
        self.linear = DynamicLinear.from_float(plain)  # the weights are packed here, for the current engine
        self.act = linear.act if isinstance(linear, Linear) else None

    def forward(self, x: Tensor) -> Tensor:
        out = self.linear(x)
        return out if self.act is None else _ACTS[self.act](out)


def _quantize_linears(module: nn.Module, tied: set[int]) -> None:
    """Swap, in place, every float Linear under ``module`` whose weight is not in ``tied`` for an Int8Linear."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear) and id(child.weight) not in tied:
            setattr(module, name, Int8Linear(child))
        else:
            _quantize_linears(child, tied)


def int8_static(model: Any, engine: str = "auto") -> Any:
    """An int8 copy of ``model`` (a BertModel or a head class): the same class and forward, its Linear weights
    int8 and packed for ``engine`` (see ``choose_engine``); the float model and the process's engine setting
    are untouched."""
    chosen = choose_engine(engine)
    q = copy.deepcopy(model).cpu().eval()
    seen: set[int] = set()
    tied: set[int] = set()
    for _, p in q.named_parameters(remove_duplicate=False):  # a weight met twice is shared: stays float
        (tied if id(p) in seen else seen).add(id(p))
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = chosen
    try:
        _quantize_linears(q, tied)
    finally:
        torch.backends.quantized.engine = before
    q.int8_engine = chosen
    return q


__all__ = ["Int8Linear", "choose_engine", "int8_static"]
