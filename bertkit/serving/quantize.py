"""``bertkit serve --int8``: dynamic int8 quantisation (PyTorch) of the model's Linear layers, CPU only.

bertkit's own forward reads the weights directly (its fused kernels), so the quantised model is the
export-friendly ``StaticBert`` computation over the same modules (``bertkit.export``), whose Linear layers
``torch.ao.quantization.quantize_dynamic`` swaps for int8 ones (weights int8, activations quantised per
batch at run time). Its outputs are in ``StaticBert``'s order (see there).
"""

from __future__ import annotations

from typing import Any

import torch


def int8_static(model: Any) -> Any:
    """An int8 ``StaticBert`` over ``model`` (a BertModel or a head class); the float model is untouched."""
    import copy

    from torch.ao.quantization import quantize_dynamic

    from ..export import StaticBert

    return quantize_dynamic(
        StaticBert(copy.deepcopy(model).cpu().eval()).eval(), {torch.nn.Linear}, dtype=torch.qint8
    )


__all__ = ["int8_static"]
