"""The BERT encoder: embeddings, post-LN Transformer blocks, pooler.

Parameter names equal transformers' ``BertModel`` state-dict names, so checkpoints move between the
two by a rename-free load.

Speed: when a batch carries padding, every position-wise operation (Q/K/V and output projections,
feed-forward, LayerNorm) runs on the packed real tokens only ([N, H] with N = number of real
tokens); only the attention itself sees the padded [B, heads, T, d] layout. The arithmetic per real
token is unchanged, so results equal the padded computation up to float rounding.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import BertConfig
from .dropout import Dropout, dropout, eager_cpu_fp32
from .modeling_utils import BertPreTrainedModel


def gelu(x: Tensor) -> Tensor:
    """Exact GELU, x * Phi(x), as in the original release's later versions and transformers' "gelu"."""
    return F.gelu(x)


def gelu_tanh(x: Tensor) -> Tensor:
    """The tanh approximation of GELU (transformers' "gelu_new")."""
    return F.gelu(x, approximate="tanh")


ACT2FN: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": gelu,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": F.relu,
}


# oneDNN's fp32 GEMM runs 2-4x faster than the MKL path that ``F.linear`` takes on CPUs where MKL
# picks a generic kernel (AMD EPYC here); results agree to float rounding (~1e-6 relative).
# ``BERTKIT_ONEDNN=0`` turns it off.
_ONEDNN_ACTS = {"gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "gelu_pytorch_tanh": ("gelu", "tanh")}


def _onednn_linear_op():
    if os.environ.get("BERTKIT_ONEDNN", "1") == "0" or not torch.backends.mkldnn.is_available():
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


_onednn = _onednn_linear_op()


def _bucket(rows: int) -> int:
    """``rows`` rounded up to one of 8 sizes per power of two (at most 12.5% more; powers of two up to 64).

    oneDNN builds and keeps a kernel per GEMM shape; with packed batches the row count changes every
    batch, and without buckets the process kept growing by ~2 MB per new shape."""
    if rows <= 64:
        return 1 << max(rows - 1, 0).bit_length()
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    return x if x.shape[0] == rows else torch.cat([x, x.new_zeros(rows - x.shape[0], x.shape[1])])


def _dnn(x: Tensor, weight: Tensor, bias: Tensor | None, attr: str = "none", algo: str = "") -> Tensor:
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    rows = x2.shape[0]
    out = _onednn(_pad_rows(x2, _bucket(rows)), weight, bias, attr, [], algo)[:rows]
    return out.view(*shape[:-1], weight.shape[0])


class _DnnLinear(torch.autograd.Function):
    """y = x W^T + b with oneDNN GEMMs forward and backward."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _dnn(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        n = grad.numel() // grad.shape[-1]
        # the gradient's rows padded to the GEMM bucket once, for both GEMMs (for the MLM decoder it is a
        # [rows, vocab] tensor: padding it twice cost a second large copy)
        g2 = _pad_rows(grad.contiguous().view(n, grad.shape[-1]), _bucket(n))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            # oneDNN reads the transposed weight in place (a strided view): no [in, out] copy
            grad_x = _onednn(g2, weight.t(), None, "none", [], "")[:n].view(*grad.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            # padded like the gradient: zero rows add nothing to the sum over rows
            x2 = _pad_rows(x.reshape(n, x.shape[-1]), g2.shape[0])
            # grad_w = g^T x sums over rows: oneDNN wants its first operand row-major, and reads the second
            # in place when strided. Copying the narrower of the two transposed (and reading the wider
            # in place) halves the time on the feed-forward and MLM-decoder shapes against copying both.
            if g2.shape[1] >= x2.shape[1]:
                grad_w = _onednn(x2.t().contiguous(), g2.t(), None, "none", [], "").t()
            else:
                grad_w = _onednn(g2.t().contiguous(), x2.t(), None, "none", [], "")
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g2.sum(0)  # the padding rows are zeros
        return grad_x, grad_w, grad_b


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, act: str | None = None) -> Tensor:
    """``act(F.linear(x, weight, bias))`` (``act``: a key of ACT2FN or None), on oneDNN for fp32 CPU
    tensors (the activation fused into the GEMM when no gradient is needed), else on ``F.linear``."""
    # a traced graph (TorchScript, and so the ONNX export) and torch.compile get the plain op: the row buckets
    # are Python ints (tracing is checked first, so nothing turns a traced size into a Python value)
    fast = _onednn is not None and eager_cpu_fp32(x) and x.numel() > 0
    fast = fast and weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    if not fast:
        out = F.linear(x, weight, bias)
    elif torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        out = _DnnLinear.apply(x.contiguous(), weight, bias)
    elif act in _ONEDNN_ACTS:
        return _dnn(x.contiguous(), weight, bias, *_ONEDNN_ACTS[act])
    else:
        out = _dnn(x.contiguous(), weight, bias)
    return out if act is None else ACT2FN[act](out)


@dataclass
class BertModelOutput:
    """``last_hidden_state`` [B, T, H]; ``pooler_output`` [B, H] or None; ``hidden_states``: embeddings
    output then each layer's output, each [B, T, H], when asked for."""

    last_hidden_state: Tensor
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None

    def __getitem__(self, i: int) -> Tensor | None:  # tuple-style access, as transformers allows
        return (self.last_hidden_state, self.pooler_output, self.hidden_states)[i]


class BertEmbeddings(nn.Module):
    """word + position + segment embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).unsqueeze(0), persistent=False
        )

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor | None = None
    ) -> Tensor:
        """input_ids, token_type_ids: [B, T] -> [B, T, H]."""
        seq_len = input_ids.shape[1]
        if position_ids is None:
            position_ids = self.position_ids[:, :seq_len]
        return self.embed(input_ids, token_type_ids, position_ids)

    def embed(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """Ids of any (broadcast-compatible) shape S -> [*S, H]; used on packed real tokens ([N])."""
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


def _attention_with_dropout(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool, p: float
) -> Tensor:
    """softmax(q k^T / sqrt(d)) with dropout p on the probabilities, times v: q, k, v [B, heads, T, d] -> [B, heads, T, d].

    What SDPA computes on CPU when dropout_p > 0 (its math path: the fused kernel has no dropout), with
    bertkit's cheaper dropout mask on the [B, heads, T, T] probabilities. attn_mask: bool, True = attend."""
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
    if is_causal:
        tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        attn_mask = tri if attn_mask is None else attn_mask & tri
    if attn_mask is not None:  # the most negative float rather than -inf: a row with no key left stays finite
        scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
    return torch.matmul(dropout(torch.softmax(scores, dim=-1), p, True), v)


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention (query/key/value projections)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.dropout_p = config.attention_probs_dropout_prob
        self._fused: tuple[tuple, Tensor, Tensor] | None = None  # (key, weight, bias) when no grad is needed

    def _fused_params(self) -> tuple[Tensor, Tensor]:
        """[3H, H] weight and [3H] bias of query, key and value side by side.

        Concatenated on every call when autograd needs the pieces; otherwise cached, keyed on each
        parameter's storage and version counter (so an in-place update or ``.to()`` rebuilds it)."""
        params = (
            self.query.weight,
            self.key.weight,
            self.value.weight,
            self.query.bias,
            self.key.bias,
            self.value.bias,
        )
        if torch.is_grad_enabled() and any(p.requires_grad for p in params):
            self._fused = None
            return torch.cat(params[:3]), torch.cat(params[3:])
        key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)
        if self._fused is None or self._fused[0] != key:
            with torch.no_grad():
                self._fused = (key, torch.cat(params[:3]), torch.cat(params[3:]))
        return self._fused[1], self._fused[2]

    def qkv(self, x: Tensor) -> Tensor:
        """One fused projection: x [..., H] -> [..., 3H] (query, key, value side by side)."""
        weight, bias = self._fused_params()
        return linear(x, weight, bias)

    def attend(self, qkv: Tensor, attn_mask: Tensor | None, is_causal: bool = False) -> Tensor:
        """qkv [B, T, 3H], attn_mask broadcastable to [B, heads, T, T] (bool, True = attend) -> [B, T, H]."""
        b, t, _ = qkv.shape
        q, k, v = qkv.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.training and self.dropout_p > 0 and eager_cpu_fp32(q):
            ctx = _attention_with_dropout(q, k, v, attn_mask, is_causal, self.dropout_p)
        else:
            ctx = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=attn_mask,
                dropout_p=self.dropout_p if self.training else 0.0,
                is_causal=is_causal and attn_mask is None,
            )
        return ctx.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)

    def attend_packed(self, qkv: Tensor, packing: _Packing, causal: bool) -> Tensor:
        """qkv [R, 3H] of packed real tokens (then padding rows) -> [R, H]: each group of equal-length sequences attends
        as one dense batch with no mask, so no work is spent on padding."""
        # One split rather than a slice per group: the backward of a slice writes its gradient into a
        # zero-filled tensor of the whole qkv size (one per group); split's backward is one concatenation.
        sizes = [count * length for count, length in packing.groups]
        extra = qkv.shape[0] - packing.tokens
        parts = qkv.split(sizes + [extra] if extra else sizes)
        outs = []
        for part, (count, length) in zip(parts, packing.groups):
            outs.append(
                self.attend(part.view(count, length, -1), None, is_causal=causal).view(count * length, -1)
            )
        if extra:  # the rows that round the packing up: nothing attends from or to them
            outs.append(qkv.new_zeros(extra, outs[0].shape[1]))
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class BertSelfOutput(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(linear(x, self.dense.weight, self.dense.bias)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT2FN[config.hidden_act]
        self.act_name = config.hidden_act

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.dense.weight, self.dense.bias, self.act_name)


class BertOutput(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(linear(x, self.dense.weight, self.dense.bias)) + residual)


class _Packing:
    """Where the real tokens of a padded [B, T] batch sit, to move between [N, H] and [B, T, H].

    Sequences are packed longest first, so sequences of equal length lie side by side: ``groups``
    lists (number of sequences, length) for each run of equal lengths, in packed order; a run
    views as a dense [count, length, H] block for attention. Any mask pattern works (not only
    right padding): a sequence's real tokens keep their order and their position ids.
    """

    def __init__(self, mask: Tensor) -> None:
        self.batch, self.seq_len = mask.shape
        lengths = mask.sum(1)
        order = torch.sort(lengths, descending=True, stable=True).indices
        rows, cols = mask.index_select(0, order).nonzero(as_tuple=True)
        self.index = order.index_select(0, rows) * self.seq_len + cols  # [N] flat positions, packed order
        # The packed rows are rounded up to one of a few sizes per power of two (`_bucket`) with copies of the
        # first real token, which no group attends to and `unpack` drops. Every activation then comes in a
        # few shapes, so the allocator reuses freed blocks: with a new row count every batch, training grew
        # the heap by hundreds of MB (freed but fragmented memory). The GEMMs pad to these sizes anyway.
        self.tokens = int(self.index.numel())
        extra = _bucket(self.tokens) - self.tokens if self.tokens else 0
        self.rows = self.index if not extra else torch.cat([self.index, self.index[:1].expand(extra)])
        values, counts = torch.unique_consecutive(lengths.index_select(0, order), return_counts=True)
        # (number of sequences, length) of each run of equal lengths, in packed order
        self.groups = [(c, n) for n, c in zip(values.tolist(), counts.tolist()) if n > 0]

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, ...] -> [R, ...], R = ``len(self.rows)`` >= N real tokens (the extra rows are padding)."""
        return x.reshape(self.batch * self.seq_len, *x.shape[2:]).index_select(0, self.rows)

    def unpack(self, x: Tensor) -> Tensor:
        """[R, ...] -> [B, T, ...] with zeros at padded positions."""
        out = x.new_zeros(self.batch * self.seq_len, *x.shape[1:])
        out = out.index_copy(0, self.index, x[: self.tokens])
        return out.view(self.batch, self.seq_len, *x.shape[1:])


class BertLayer(nn.Module):
    """One post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self, x: Tensor, attn_mask: Tensor | None, packing: _Packing | None = None, causal: bool = False
    ) -> Tensor:
        """x: [B, T, H], or [N, H] of packed real tokens when ``packing`` is given."""
        qkv = self.attention.self.qkv(x)
        if packing is not None:
            ctx = self.attention.self.attend_packed(qkv, packing, causal)
        else:
            ctx = self.attention.self.attend(qkv, attn_mask, is_causal=causal)
        x = self.attention.output(ctx, x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.gradient_checkpointing = False

    def forward(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        packing: _Packing | None,
        output_hidden_states: bool,
        causal: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        states: list[Tensor] = [x] if output_hidden_states else []
        for layer in self.layer:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(
                    layer, x, attn_mask, packing, causal, use_reentrant=False
                )
            else:
                x = layer(x, attn_mask, packing, causal)
            if output_hidden_states:
                states.append(x)
        return x, states


class BertPooler(nn.Module):
    """dense + tanh on the first ([CLS]) token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: Tensor) -> Tensor:
        """[B, T, H] -> [B, H]"""
        return self.activation(linear(hidden_states[:, 0], self.dense.weight, self.dense.bias))


def attention_mask_for(
    attention_mask: Tensor | None, seq_len: int, causal: bool, device: torch.device
) -> Tensor | None:
    """Boolean mask broadcastable to [B, heads, T, T] (True = may attend), or None when nothing is masked.

    attention_mask: [B, T] with 1 for real tokens and 0 for padding.
    """
    mask = None
    if attention_mask is not None:
        mask = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, T]
    if causal:
        tri = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()[None, None]
        mask = tri if mask is None else mask & tri
    return mask


class BertModel(BertPreTrainedModel):
    """The bidirectional Transformer encoder of the paper (and its pooler)."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        causal: bool = False,
    ) -> BertModelOutput:
        """input_ids, attention_mask, token_type_ids: [B, T] -> BertModelOutput.

        ``causal=True`` lets each position attend only to itself and earlier ones (the left-to-right
        LM ablation). Padded positions of the outputs hold values that carry no meaning.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq_len], got shape {tuple(input_ids.shape)}")
        batch, seq_len = input_ids.shape
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}; truncate the input (max_length)"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = self.embeddings.position_ids[:, :seq_len]

        has_padding = attention_mask is not None and not bool(attention_mask.all())
        if has_padding:
            # Every position-wise operation (embeddings included) runs on the N real tokens only, and
            # attention on groups of equal-length sequences; outputs are scattered back to [B, T, H].
            packing = _Packing(attention_mask.bool())
            x = self.embeddings.embed(
                packing.pack(input_ids),
                packing.pack(token_type_ids),
                packing.pack(position_ids.expand(batch, seq_len)),
            )
            mask = None
        else:
            packing = None
            x = self.embeddings.embed(input_ids, token_type_ids, position_ids)
            mask = None
        x, states = self.encoder(x, mask, packing, output_hidden_states, causal)
        if packing is not None:
            x = packing.unpack(x)
            states = [packing.unpack(s) for s in states]
        pooled = self.pooler(x) if self.pooler is not None else None
        return BertModelOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(states) if output_hidden_states else None,
        )

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def gradient_checkpointing_enable(self) -> None:
        """Recompute each block's activations in backward: less memory for long sequences."""
        self.encoder.gradient_checkpointing = True


def num_parameters(module: nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen = {id(p): p.numel() for p in module.parameters()}
    return int(sum(seen.values()))


__all__ = [
    "ACT2FN",
    "BertEmbeddings",
    "BertEncoder",
    "BertLayer",
    "BertModel",
    "BertModelOutput",
    "BertPooler",
    "attention_mask_for",
    "gelu",
    "gelu_tanh",
    "linear",
    "num_parameters",
]
