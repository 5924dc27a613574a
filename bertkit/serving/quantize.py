"""``bertkit serve --int8``: dynamic int8 quantisation (PyTorch) of the model's Linear layers, CPU only.

bertkit's own forward reads the weights directly (its fused kernels), so the quantised model is the
export-friendly ``StaticBert`` computation over the same modules (``bertkit.export``), whose Linear layers
``torch.ao.quantization.quantize_dynamic`` swaps for int8 ones (weights int8, activations quantised per
batch at run time). Its outputs are in ``StaticBert``'s order (see there).

Which int8 GEMM runs is fixed when the weights are packed: PyTorch's quantised engine at that moment
(``fbgemm``, ``onednn``, or ``x86``, which packs dynamic Linear weights for fbgemm). The packed weights
keep their kernel afterwards, whatever the process's engine is later. ``engine="auto"`` packs for oneDNN
on a CPU with AMX int8 tiles (oneDNN's int8 GEMM uses them; fbgemm does not) and keeps PyTorch's default
elsewhere. On the Xeon with AMX this was measured on (``benchmarks/bench_int8.py``, docs/serving.md),
oneDNN's int8 encoder ran well ahead of fbgemm's for the same outputs bound.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UserError

ENGINES = ("auto", "x86", "fbgemm", "onednn")


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


def int8_static(model: Any, engine: str = "auto") -> Any:
    """An int8 ``StaticBert`` over ``model`` (a BertModel or a head class), its Linear weights packed for
    ``engine`` (see ``choose_engine``); the float model and the process's engine setting are untouched."""
    import copy

    from torch.ao.quantization import quantize_dynamic

    from ..export import StaticBert

    chosen = choose_engine(engine)
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = chosen
    try:
        q = quantize_dynamic(
            StaticBert(copy.deepcopy(model).cpu().eval()).eval(), {torch.nn.Linear}, dtype=torch.qint8
        )
    finally:
        torch.backends.quantized.engine = before
    q.int8_engine = chosen
    return q


__all__ = ["ENGINES", "choose_engine", "int8_static"]
