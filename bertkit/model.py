"""BERT, the encoder of "BERT: Pre-training of Deep Bidirectional Transformers" (Devlin et al., 2019).

Read top to bottom: embeddings -> self-attention -> Transformer block -> encoder -> pooler -> BertModel.
Shapes: B batch, T sequence length, H hidden size, A attention heads, d = H / A per head, I = 4H the
feed-forward width. Parameter names equal transformers' ``BertModel`` state-dict names, so checkpoints
move between the two by a rename-free load.

The arithmetic is the paper's. How it runs fast on a CPU lives in :mod:`bertkit.kernels`, behind a few
modules and calls (``kernels.Linear``, ``kernels.Dropout``, ``kernels.qkv_projection``,
``kernels.scaled_dot_product_attention``, ``kernels.packing_for``): the layers are ordinary modules that
read ``self.dense(x)``, their kernels inside them. ``with bertkit.kernels.reference_ops():`` runs the same
model on plain PyTorch ops (tests/test_kernels.py checks both agree, outputs and gradients).

One thing the kernels change in the flow: when a batch carries padding, the position-wise work
(embeddings, projections, feed-forward, LayerNorm) runs on the packed real tokens only, [R, H] rows
instead of [B, T, H], and attention runs per group of equal-length sequences (``packing`` below).
Without padding, or with the kernels off, every tensor keeps its [B, T, H] shape and padding is masked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import bert_family, kernels
from .config import BertConfig
from .kernels import Linear, Packing
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


@dataclass
class BertModelOutput:
    """``last_hidden_state`` [B, T, H]; ``pooler_output`` [B, H] or None; ``hidden_states``: embeddings
    output then each layer's output, each [B, T, H], when asked for."""

    last_hidden_state: Tensor
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None

    def __getitem__(self, i: int) -> Tensor | None:  # tuple-style access, as transformers allows
        return (self.last_hidden_state, self.pooler_output, self.hidden_states)[i]


# ------------------------------------------------------------------------------------------ embeddings


class BertEmbeddings(nn.Module):
    """Input representation (paper, figure 2): token + segment + position embeddings, summed, then
    LayerNorm and dropout. Positions are learned, up to ``max_position_embeddings`` (512)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width = config.embedding_width  # hidden_size, or ELECTRA's narrower embeddings
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = kernels.Dropout(config.hidden_dropout_prob)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).unsqueeze(0), persistent=False
        )

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """Ids of any (broadcast-compatible) shape S -> [*S, H]: [B, T] for a batch, [R] for packed tokens."""
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


# -------------------------------------------------------------------------------------- self-attention


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention: each of A heads attends over all positions with its own
    d-dimensional slice of the query, key and value projections; the heads' outputs are concatenated."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.query = Linear(h, h)
        self.key = Linear(h, h)
        self.value = Linear(h, h)
        self.dropout_p = config.attention_probs_dropout_prob  # on the attention probabilities

    def forward(self, x: Tensor, mask: Tensor | None, packing: Packing | None, causal: bool) -> Tensor:
        """x [B, T, H] (or [R, H] packed) -> the heads' context vectors, same shape."""
        qkv = kernels.qkv_projection(x, self.query, self.key, self.value)  # [..., 3H]: Q, K, V side by side
        if packing is not None:  # each group of equal-length sequences attends as a dense batch, no mask
            return kernels.packed_attention(qkv, packing, lambda part: self.attend(part, None, causal))
        return self.attend(qkv, mask, causal)

    def attend(self, qkv: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        """qkv [B, T, 3H], mask [B, 1, 1, T] (bool, True = may attend) or None -> [B, T, H]."""
        b, t, _ = qkv.shape
        # split into heads: each of q, k, v is [B, A, T, d]
        q, k, v = qkv.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        # softmax(q k^T / sqrt(d)) v, per head: [B, A, T, d]
        p = self.dropout_p if self.training else 0.0
        ctx = kernels.scaled_dot_product_attention(q, k, v, mask, causal, p)
        return ctx.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)  # heads concatenated


class BertSelfOutput(nn.Module):
    """The attention's output projection, dropout, then the residual connection and LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = kernels.Dropout(config.hidden_dropout_prob)

    def forward(self, ctx: Tensor, residual: Tensor) -> Tensor:
        """ctx, residual [..., H] -> LayerNorm(residual + dropout(ctx W^T + b)) [..., H]."""
        return self.LayerNorm(self.dropout(self.dense(ctx)) + residual)


class BertAttention(nn.Module):
    """Self-attention and its output sub-layer (post-LN, as in the original Transformer)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None, packing: Packing | None, causal: bool) -> Tensor:
        """x [..., H] -> LayerNorm(x + Attention(x)) [..., H]."""
        return self.output(self.self(x, mask, packing, causal), x)


# ------------------------------------------------------------------------------------ Transformer block


class BertIntermediate(nn.Module):
    """The feed-forward network's first layer and its activation: [..., H] -> [..., I]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        # act(x W^T + b): the activation belongs to the Linear, fused into its GEMM where the kernel can
        self.dense = Linear(config.hidden_size, config.intermediate_size, act=config.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.dense(x)


class BertOutput(nn.Module):
    """The feed-forward network's second layer, dropout, residual and LayerNorm: [..., I] -> [..., H]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = kernels.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertLayer(nn.Module):
    """One Transformer block: x = LN(x + Attention(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self, x: Tensor, mask: Tensor | None, packing: Packing | None = None, causal: bool = False
    ) -> Tensor:
        """x [B, T, H], or [R, H] of packed real tokens when ``packing`` is given -> the same shape."""
        x = self.attention(x, mask, packing, causal)
        return self.output(self.intermediate(x), x)


# -------------------------------------------------------------------------------------- encoder, pooler


class BertEncoder(nn.Module):
    """L Transformer blocks, one after another."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.gradient_checkpointing = False

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        packing: Packing | None,
        output_hidden_states: bool,
        causal: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        """x [B, T, H] (or [R, H]) -> (the last block's output, [x, each block's output] when asked)."""
        states: list[Tensor] = [x] if output_hidden_states else []
        for layer in self.layer:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                # recompute the block in backward instead of keeping its activations
                x = torch.utils.checkpoint.checkpoint(layer, x, mask, packing, causal, use_reentrant=False)
            else:
                x = layer(x, mask, packing, causal)
            if output_hidden_states:
                states.append(x)
        return x, states


class BertPooler(nn.Module):
    """The sequence-level representation: dense + tanh on the first ([CLS]) token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: Tensor) -> Tensor:
        """[B, T, H] -> [B, H]"""
        return self.activation(self.dense(hidden_states[:, 0]))


def batch_shape(input_ids: Tensor, max_positions: int) -> tuple[int, int]:
    """(B, T) of input_ids [B, T]; ValueError for another rank or more than ``max_positions`` tokens."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq_len], got shape {tuple(input_ids.shape)}")
    batch, seq_len = input_ids.shape
    if seq_len > max_positions:
        raise ValueError(
            f"sequence length {seq_len} exceeds max_position_embeddings {max_positions}; truncate the input "
            "(max_length)"
        )
    return batch, seq_len


def attention_mask_for(attention_mask: Tensor | None) -> Tensor | None:
    """[B, T] with 1 for real tokens and 0 for padding -> bool [B, 1, 1, T] (True = may attend), or None.

    A batch without padding needs no mask; that check reads the mask's values, so a trace skips it (it would
    freeze the example batch's answer into the graph) and always masks. ``torch.compile`` breaks the graph
    there instead, which keeps the unmasked fast path for full batches (the GPU benchmarks measure it so)."""
    if attention_mask is None:
        return None
    if not torch.jit.is_tracing() and bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


class BertModel(BertPreTrainedModel):
    """The bidirectional Transformer encoder of the paper (and its pooler)."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        # ELECTRA's small models embed narrower than they compute: a linear map up to the hidden size
        width = config.embedding_width
        self.embeddings_project = (
            nn.Linear(width, config.hidden_size) if width != config.hidden_size else None
        )
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
        """input_ids, attention_mask, token_type_ids, position_ids: [B, T] -> BertModelOutput.

        ``causal=True`` lets each position attend only to itself and earlier ones (the left-to-right
        LM ablation). Padded positions of the outputs hold values that carry no meaning.
        """
        batch, seq_len = batch_shape(input_ids, self.config.max_tokens)
        if token_type_ids is None or self.config.type_vocab_size == 1:  # one segment type: no segment ids
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None and self.config.position_offset:  # a RoBERTa checkpoint's numbering
            position_ids = bert_family.position_ids_from_input_ids(input_ids, self.config.pad_token_id)
        elif position_ids is None:
            position_ids = self.embeddings.position_ids[:, :seq_len]
        position_ids = position_ids.expand(batch, seq_len)

        # With padding and the kernels on: run on the real tokens only, [R, H], and scatter back at the end.
        packing = kernels.packing_for(attention_mask)
        if packing is not None:
            input_ids, token_type_ids, position_ids = map(
                packing.pack, (input_ids, token_type_ids, position_ids)
            )
            mask = None
        else:
            mask = attention_mask_for(attention_mask)
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # [B, T, H] or [R, H]
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        x, states = self.encoder(x, mask, packing, output_hidden_states, causal)
        if packing is not None:
            x, states = packing.unpack(x), [packing.unpack(s) for s in states]
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
    """Number of distinct parameters (``parameters()`` yields a tied weight once)."""
    return sum(p.numel() for p in module.parameters())


__all__ = [
    "ACT2FN",
    "BertEmbeddings",
    "BertEncoder",
    "BertLayer",
    "BertModel",
    "BertModelOutput",
    "BertPooler",
    "attention_mask_for",
    "batch_shape",
    "gelu",
    "gelu_tanh",
    "num_parameters",
]
