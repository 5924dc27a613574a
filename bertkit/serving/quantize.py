"""``bertkit serve --int8``: dynamic int8 quantisation (PyTorch) of the model's Linear layers, CPU only.

bertkit's own forward reads the weights directly (its fused kernels), so the quantised model is the
``StaticBert`` computation over the same modules (``bertkit.export``), whose Linear layers
``torch.ao.quantization.quantize_dynamic`` swaps for int8 ones (weights int8, activations quantised per
call at run time). Its outputs are in ``StaticBert``'s order (see there).

Packed tokens: ``StaticBert`` runs every Linear over the padded ``[B, T, H]`` batch, so a batch of
sentences of mixed lengths spends most of its int8 GEMMs on padding, while the float path (bertkit's packed
forward) does not: that alone made ``serve --int8`` slower than float. ``PackedStaticBert`` runs the Linear
layers over the real tokens only (``[N, H]``, N = tokens in the batch), packed as the float path packs
them, and attention per group of equal-length sequences; outputs at real positions are ``StaticBert``'s,
padding positions are zeros.

Which int8 GEMM runs is fixed when the weights are packed: PyTorch's quantised engine at that moment
(``fbgemm``, ``onednn``, or ``x86``, which packs dynamic Linear weights for fbgemm). The packed weights
keep their kernel afterwards, whatever the process's engine is later. ``engine="auto"`` packs for oneDNN
on a CPU with AMX int8 tiles (oneDNN's int8 GEMM uses them; fbgemm does not) and keeps PyTorch's default
elsewhere. On the Xeon with AMX this was measured on (``benchmarks/bench_int8.py``, docs/guide/serving.md),
oneDNN's int8 encoder ran well ahead of fbgemm's for the same outputs bound.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UserError
from ..export import StaticBert
from ..kernels.packing import Packing, packed_attention

ENGINES = ("auto", "x86", "fbgemm", "onednn")


class PackedStaticBert(StaticBert):
    """``StaticBert`` with every position-wise layer over the batch's real tokens only (see the module doc).

    The packing is the float path's (:class:`bertkit.kernels.packing.Packing`): real tokens side by side,
    attention per group of equal-length sequences with no mask, so no int8 GEMM and no attention score is
    spent on padding.
    """

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        """input_ids, attention_mask, token_type_ids [B, T] -> hidden states [B, T, H] (0 at padding)."""
        emb = self.bert.embeddings
        b, t = input_ids.shape
        packing = Packing(attention_mask.bool())
        positions = emb.position_ids[0, :t].expand(b, t)
        x = emb.word_embeddings(packing.pack(input_ids)) + emb.token_type_embeddings(
            packing.pack(token_type_ids)
        )
        x = emb.LayerNorm(x + emb.position_embeddings(packing.pack(positions)))  # [R, H]
        for layer in self.bert.encoder.layer:
            att = layer.attention.self
            qkv = torch.cat([att.query(x), att.key(x), att.value(x)], 1)  # [R, 3H]
            ctx = packed_attention(qkv, packing, self._attend)  # [R, H]
            out = layer.attention.output
            x = out.LayerNorm(out.dense(ctx) + x)
            ffn = layer.output
            x = ffn.LayerNorm(ffn.dense(self.act(layer.intermediate.dense(x))) + x)
        return packing.unpack(x)

    def _attend(self, qkv: torch.Tensor) -> torch.Tensor:
        """[count, length, 3H] of equal-length sequences -> [count, length, H]: softmax(q k^T / sqrt(d)) v."""
        count, length, _ = qkv.shape
        q, k, v = qkv.view(count, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # [c, A, n, d]
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(count, length, -1)


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
    """An int8 ``PackedStaticBert`` over ``model`` (a BertModel or a head class), its Linear weights packed for
    ``engine`` (see ``choose_engine``); the float model and the process's engine setting are untouched."""
    import copy

    from torch.ao.quantization import quantize_dynamic

    chosen = choose_engine(engine)
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = chosen
    try:
        q = quantize_dynamic(
            PackedStaticBert(copy.deepcopy(model).cpu().eval()).eval(),
            {torch.nn.Linear},
            dtype=torch.qint8,
        )
    finally:
        torch.backends.quantized.engine = before
    q.int8_engine = chosen
    return q


__all__ = ["ENGINES", "PackedStaticBert", "choose_engine", "int8_static"]
