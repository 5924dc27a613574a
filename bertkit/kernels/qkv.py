"""The query, key and value projections as one GEMM against their concatenated weights."""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn

from .gemm import Linear, linear
from .state import enabled

_FUSABLE = (nn.Linear, Linear)  # the float modules whose weights the fused GEMM reads

# query Linear -> (key of the parameters' identity and versions, [3H, H] weight, [3H] bias)
_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fused_params(query: nn.Linear, key: nn.Linear, value: nn.Linear) -> tuple[Tensor, Tensor]:
    """[3H, H] weight and [3H] bias of query, key and value side by side.

    Concatenated on every call when autograd needs the pieces; otherwise cached, keyed on each parameter's
    storage and version counter (so an in-place update or ``.to()`` rebuilds it)."""
    params = (query.weight, key.weight, value.weight, query.bias, key.bias, value.bias)
    if torch.is_grad_enabled() and any(p.requires_grad for p in params):
        _cache.pop(query, None)
        return torch.cat(params[:3]), torch.cat(params[3:])
    stamp = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)
    hit = _cache.get(query)
    if hit is None or hit[0] != stamp:
        with torch.no_grad():
            hit = (stamp, torch.cat(params[:3]), torch.cat(params[3:]))
        _cache[query] = hit
    return hit[1], hit[2]


def qkv_projection(x: Tensor, query: nn.Module, key: nn.Module, value: nn.Module) -> Tensor:
    """x [..., H] -> [..., 3H]: the query, key and value projections side by side (one GEMM against their
    concatenated weights when the kernels are on and all three are float ``nn.Linear``; otherwise each
    module is called: the reference ops, or modules a quantiser swapped in)."""
    if not enabled() or not all(type(m) in _FUSABLE for m in (query, key, value)):
        return torch.cat([query(x), key(x), value(x)], dim=-1)
    weight, bias = _fused_params(query, key, value)
    return linear(x, weight, bias)
