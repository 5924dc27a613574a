"""ModernBERT, the encoder of "Smarter, Better, Faster, Longer" (Warner et al., 2024), and its heads.

Read top to bottom: rotary positions -> embeddings -> attention (global or sliding-window) -> GeGLU
feed-forward -> pre-norm block -> ModernBertModel -> heads. Shapes: B batch, T sequence length, H hidden size,
A attention heads, d = H / A per head, I the feed-forward width, W = local_attention // 2 the window's reach.
Parameter names equal transformers' ``ModernBert*`` state-dict names, so checkpoints move between the two by
a rename-free load.

What differs from :mod:`bertkit.model`'s BERT of 2018:

- no position embeddings: queries and keys are rotated by their position (RoPE, Su et al. 2021), with one
  base (``global_rope_theta``) in the global layers and another (``local_rope_theta``) in the local ones;
- attention alternates: layer i attends over the whole sequence when ``i % global_attn_every_n_layers == 0``
  (layer 0 always), else over a sliding window of the tokens at distance <= W;
- pre-normalisation (x + f(LN(x)), the first block's attention reads the embeddings' LayerNorm directly) and
  a final LayerNorm; LayerNorms and linear layers without biases unless the config asks for them;
- the feed-forward is GeGLU: ``Wi`` maps H to 2I, split into an input and a gate, act(input) * gate -> ``Wo``.

The speed machinery is :mod:`bertkit.kernels`' modules and calls, as in BERT: ``kernels.Linear``,
``kernels.scaled_dot_product_attention``, ``kernels.Dropout`` and, for padded batches, ``kernels.packing_for``
(position-wise work on the real tokens only, attention per group of equal-length sequences).
``with bertkit.kernels.reference_ops():`` runs the padded batch with masks instead. The local layers call
``kernels.sliding_window_attention``, which never builds a T x T mask for a long sequence (memory linear in T).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import kernels
from .heads.finetune import (
    MultipleChoiceOutput,
    QuestionAnsweringOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
    classification_loss,
    span_loss,
)
from .heads.pretraining import (
    BertForPreTrainingOutput,
    MaskedLMOutput,
    mlm_logits_and_loss,
    pretraining_output,
)
from .kernels import Linear, Packing
from .model import ACT2FN, batch_shape
from .modeling_utils import BertPreTrainedModel
from .modernbert_config import ModernBertConfig
from .pooling import pool


@dataclass
class ModernBertModelOutput:
    """``last_hidden_state`` [B, T, H] (after the final norm); ``hidden_states``: the embeddings' output, each
    layer's output but the last, then ``last_hidden_state`` (as transformers lists them), each [B, T, H], when
    asked for."""

    last_hidden_state: Tensor
    hidden_states: tuple[Tensor, ...] | None = None

    def __getitem__(self, i: int) -> Tensor | tuple[Tensor, ...] | None:
        return (self.last_hidden_state, self.hidden_states)[i]


def layer_norm(config: ModernBertConfig) -> nn.LayerNorm:
    """LayerNorm over H, with a bias only when ``norm_bias``."""
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


# ----------------------------------------------------------------------------------------- rotary positions


def rotary_inverse_frequencies(theta: float, head_dim: int) -> Tensor:
    """[d / 2]: the angle per position of each pair of dimensions, theta^(-2i/d) (RoPE's geometric series)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))


def rotate_half(x: Tensor) -> Tensor:
    """[..., d] -> [..., d]: (x1, x2) -> (-x2, x1) on the two halves, the 90-degree turn of each pair
    (dimension i is paired with i + d/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class ModernBertRotaryEmbedding(nn.Module):
    """cos and sin of each position's angles, for the global and the local base. Nothing here is saved in a
    checkpoint (the frequencies follow from the config)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        for name, theta in (("global", config.global_rope_theta), ("local", config.local_rope_theta)):
            inv_freq = rotary_inverse_frequencies(theta, config.head_dim)
            self.register_buffer(f"{name}_inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: Tensor, is_global: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """position_ids [*S] -> (cos, sin), each [*S, d] in ``dtype``; angles are computed in fp32."""
        inv_freq = self.global_inv_freq if is_global else self.local_inv_freq
        angles = position_ids[..., None].float() * inv_freq.float()  # [*S, d/2]
        angles = torch.cat((angles, angles), dim=-1)  # [*S, d]: both members of a pair turn alike
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_queries_and_keys(qkv: Tensor, cos: Tensor, sin: Tensor, heads: int) -> Tensor:
    """qkv [..., 3H] (Q, K, V side by side), cos/sin [..., d] -> the same layout with Q and K rotated by their
    positions' angles (V untouched): q * cos + rotate_half(q) * sin. With the kernels on and no autograd
    recording, ``qkv`` itself is rotated and returned (the caller's fresh projection)."""
    if kernels.fast_ok(qkv):  # the same rotation in fewer passes, in place (bertkit/kernels/rotary.py)
        return kernels.rotate_queries_and_keys(qkv, cos, sin, heads)
    lead = qkv.shape[:-1]
    parts = qkv.view(*lead, 3, heads, qkv.shape[-1] // (3 * heads))  # [..., 3, A, d]
    qk, v = parts[..., :2, :, :], parts[..., 2:, :, :]
    cos, sin = cos[..., None, None, :], sin[..., None, None, :]  # [..., 1, 1, d]: every head and Q/K alike
    qk = qk * cos + rotate_half(qk) * sin
    return torch.cat((qk, v), dim=-3).view(*lead, -1)


# --------------------------------------------------------------------------------------------- embeddings


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm and dropout (positions enter later, in attention)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.norm = layer_norm(config)
        self.drop = kernels.Dropout(config.embedding_dropout)

    def forward(self, input_ids: Tensor) -> Tensor:
        """Ids [*S] -> [*S, H]: [B, T] for a batch, [R] for packed tokens."""
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


# ---------------------------------------------------------------------------------------------- attention


class ModernBertAttention(nn.Module):
    """Multi-head self-attention with rotary positions, over the whole sequence (a global layer) or a sliding
    window of reach W (a local layer). Q, K and V come from one projection ``Wqkv``."""

    def __init__(self, config: ModernBertConfig, layer_idx: int) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.is_global = config.is_global(layer_idx)
        self.window = None if self.is_global else config.window
        h = config.hidden_size
        self.Wqkv = Linear(h, 3 * h, bias=config.attention_bias)
        self.Wo = Linear(h, h, bias=config.attention_bias)
        self.dropout_p = config.attention_dropout  # on the probabilities, and on the output as transformers
        self.out_drop = kernels.Dropout(config.attention_dropout)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, key_mask: Tensor | None, packing: Packing | None
    ) -> Tensor:
        """x [B, T, H] (or [R, H] packed), cos/sin [B or 1, T, d] (or [R, d]) -> [B, T, H] (or [R, H]).

        ``key_mask``: bool [B, T], True = a real token, or None (no padding, or packed)."""
        qkv = self.Wqkv(x)  # [..., 3H]
        qkv = rotate_queries_and_keys(qkv, cos, sin, self.num_heads)
        if packing is not None:  # each group of equal-length sequences as a dense batch of real tokens
            ctx = kernels.packed_attention(qkv, packing, lambda part: self.attend(part, None))
        else:
            ctx = self.attend(qkv, key_mask)
        return self.out_drop(self.Wo(ctx))

    def attend(self, qkv: Tensor, key_mask: Tensor | None) -> Tensor:
        """qkv [B, T, 3H], key_mask [B, T] (bool, True = a real token) or None -> [B, T, H]."""
        b, t, _ = qkv.shape
        heads = qkv.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = heads.unbind(0)  # each [B, A, T, d]
        p = self.dropout_p if self.training else 0.0
        if self.window is not None:  # softmax over the keys within the window only
            ctx = kernels.sliding_window_attention(q, k, v, self.window, key_mask, p)
        else:  # softmax(q k^T / sqrt(d)) v over every real key
            mask = None if key_mask is None else key_mask[:, None, None, :]
            ctx = kernels.scaled_dot_product_attention(q, k, v, mask, False, p)
        return ctx.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)


# ----------------------------------------------------------------------------------------- feed-forward


class ModernBertMLP(nn.Module):
    """GeGLU (Shazeer, 2020): x -> Wi -> (input, gate) -> act(input) * gate -> dropout -> Wo; [..., H] -> [..., H]."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.Wi = Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACT2FN[config.hidden_activation]
        self.drop = kernels.Dropout(config.mlp_dropout)
        self.Wo = Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        inp, gate = self.Wi(x).chunk(2, dim=-1)  # each [..., I]
        return self.Wo(self.drop(self.act(inp) * gate))


# ------------------------------------------------------------------------------------------------ block


class ModernBertEncoderLayer(nn.Module):
    """One pre-norm block: x = x + Attention(LN(x)); x = x + MLP(LN(x)). The first block has no attention
    LayerNorm: the embeddings' LayerNorm has just normalised its input."""

    def __init__(self, config: ModernBertConfig, layer_idx: int) -> None:
        super().__init__()
        self.attn_norm = nn.Identity() if layer_idx == 0 else layer_norm(config)
        self.attn = ModernBertAttention(config, layer_idx)
        self.mlp_norm = layer_norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, key_mask: Tensor | None, packing: Packing | None = None
    ) -> Tensor:
        """x [B, T, H], or [R, H] of packed real tokens when ``packing`` is given -> the same shape."""
        x = x + self.attn(self.attn_norm(x), cos, sin, key_mask, packing)
        return x + self.mlp(self.mlp_norm(x))


# ------------------------------------------------------------------------------------------------ model


class ModernBertPreTrainedModel(BertPreTrainedModel):
    """Base of the ModernBERT classes: its config, its checkpoint prefix (``model.``) and its initialisation."""

    config_class: ClassVar[type] = ModernBertConfig
    base_model_prefix: ClassVar[str] = "model"
    config: ModernBertConfig

    def _init_weights(self, module: nn.Module) -> None:
        """Truncated normal, cut at ``initializer_cutoff_factor`` std: std ``initializer_range`` for the layers
        reading the residual stream (and the embeddings), scaled by 1/sqrt(2L) for those writing into it,
        H^-1/2 for a classifier; zero biases; LayerNorm weight 1. (As transformers' initialisation.)"""
        c = self.config
        stds = {
            "in": c.initializer_range,
            "out": c.initializer_range / (2.0 * c.num_hidden_layers) ** 0.5,
            "final_out": c.hidden_size**-0.5,
        }

        def init(layer: nn.Linear | nn.Embedding, kind: str) -> None:
            _truncated_normal(layer, stds[kind], c.initializer_cutoff_factor)

        if isinstance(module, ModernBertEmbeddings):
            init(module.tok_embeddings, "in")
        elif isinstance(module, (ModernBertAttention, ModernBertMLP)):
            init(module.Wqkv if isinstance(module, ModernBertAttention) else module.Wi, "in")
            init(module.Wo, "out")
        elif isinstance(module, ModernBertPredictionHead):
            init(module.dense, "out")
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        if hasattr(module, "classifier") and isinstance(module.classifier, nn.Linear):
            init(module.classifier, "final_out")
        if isinstance(module, ModernBertForMaskedLM):
            init(module.decoder, "out")


def _truncated_normal(layer: nn.Linear | nn.Embedding, std: float, cutoff: float) -> None:
    """Weights from a normal of ``std`` cut at ``cutoff`` std; a bias to zero."""
    nn.init.trunc_normal_(layer.weight, std=std, a=-cutoff * std, b=cutoff * std)
    if getattr(layer, "bias", None) is not None:
        nn.init.zeros_(layer.bias)


class ModernBertModel(ModernBertPreTrainedModel):
    """The encoder: embeddings, L pre-norm blocks alternating global and local attention, a final LayerNorm."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(
            ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.final_norm = layer_norm(config)
        self.rotary_emb = ModernBertRotaryEmbedding(config)
        self.gradient_checkpointing = False
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> ModernBertModelOutput:
        """input_ids, attention_mask (1 = real token), position_ids: [B, T] -> ModernBertModelOutput.

        ``token_type_ids`` is accepted and ignored (ModernBERT has no segment embeddings), so code written for
        BERT's call runs. Distances in the sliding window count positions in the [B, T] layout, as
        transformers does. Padded positions of the outputs hold values that carry no meaning."""
        batch, seq_len = batch_shape(input_ids, self.config.max_position_embeddings)
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=input_ids.device)[None]
        position_ids = position_ids.expand(batch, seq_len)

        # With padding and the kernels on: the real tokens only, [R, H]; scattered back at the end. The window
        # inside a packed group counts packed places, equal to positions only when each sequence's real tokens
        # are contiguous; other masks run padded.
        packing = kernels.packing_for(attention_mask)
        if packing is not None and not contiguous_rows(attention_mask):
            packing = None
        if packing is not None:
            input_ids, position_ids = packing.pack(input_ids), packing.pack(position_ids)
        key_mask = None  # [B, T] for the padded batch; a trace keeps it whatever its example's padding
        if packing is None and attention_mask is not None:
            if torch.jit.is_tracing() or not bool(attention_mask.all()):
                key_mask = attention_mask.bool()
        x = self.embeddings(input_ids)  # [B, T, H] or [R, H]
        rotary = {g: self.rotary_emb(position_ids, g, x.dtype) for g in {True, False}}
        states: list[Tensor] = [x] if output_hidden_states else []
        for layer in self.layers:
            g = layer.attn.is_global
            args = (x, *rotary[g], key_mask, packing)
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, *args, use_reentrant=False)
            else:
                x = layer(*args)
            if output_hidden_states:
                states.append(x)
        x = self.final_norm(x)
        if output_hidden_states:
            states[-1] = x  # the last entry is the normalised output, as in transformers
        if packing is not None:
            x, states = packing.unpack(x), [packing.unpack(s) for s in states]
        return ModernBertModelOutput(x, tuple(states) if output_hidden_states else None)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.tok_embeddings

    def gradient_checkpointing_enable(self) -> None:
        """Recompute each block's activations in backward: less memory for long sequences."""
        self.gradient_checkpointing = True


def contiguous_rows(attention_mask: Tensor | None) -> bool:
    """Whether every row of ``attention_mask`` [B, T] holds its real tokens side by side (right, left or no
    padding): then a packed sequence's places differ exactly as its positions do."""
    if attention_mask is None:
        return True
    m = attention_mask.bool()
    count = m.sum(1)
    first = m.int().argmax(1)
    last = m.shape[1] - 1 - m.flip(1).int().argmax(1)
    return bool(((count == 0) | (last - first + 1 == count)).all())


# ------------------------------------------------------------------------------------------------ heads


class ModernBertPredictionHead(nn.Module):
    """dense -> activation -> LayerNorm, before the MLM decoder or a classifier: [..., H] -> [..., H]."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACT2FN[config.classifier_activation]
        self.norm = layer_norm(config)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))


class ModernBertForMaskedLM(ModernBertPreTrainedModel):
    """The encoder, the prediction head, and a decoder onto the vocabulary tied to the token embeddings
    (with its own bias when ``decoder_bias``)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        self._tied_weights = (
            {"decoder.weight": "model.embeddings.tok_embeddings.weight"} if config.tie_word_embeddings else {}
        )
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.decoder

    def logits(self, hidden: Tensor) -> Tensor:
        """[..., H] -> [..., V]"""
        return self.decoder(self.head(hidden))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> MaskedLMOutput:
        """[B, T] -> logits [B, T, V]; with labels (-100 = not predicted) and ``sparse_prediction``, logits only
        for the labelled positions, [N, V], their labels in ``masked_lm_labels``."""
        enc = self.model(input_ids, attention_mask, position_ids, output_hidden_states)
        logits, loss, sel = mlm_logits_and_loss(
            self.logits, enc.last_hidden_state, labels, sparse=self.config.sparse_prediction
        )
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states, masked_lm_labels=sel)


class ModernBertForPreTraining(ModernBertForMaskedLM):
    """The masked LM plus the paper's next sentence prediction (``--objective mlm+nsp`` on a ModernBERT config).

    NSP reads the first token's vector through the masked-LM head's transform, ``head([CLS])``, then
    ``nsp_classifier`` (H -> 2): the path :class:`ModernBertForSequenceClassification` fine-tunes from (it loads
    ``head`` from the checkpoint and adds its own ``classifier``), so what NSP teaches the pooled vector is what
    fine-tuning starts with. The folder it saves is a transformers ``ModernBertForMaskedLM`` checkpoint with
    the ``nsp_classifier`` tensors beside it, which loaders of that class ignore.
    """

    saved_architecture: ClassVar[str] = "ModernBertForMaskedLM"

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        self.nsp_classifier = Linear(config.hidden_size, 2)
        with torch.no_grad():  # as a task classifier (the rest was initialised by the masked LM's __init__)
            _truncated_normal(self.nsp_classifier, config.hidden_size**-0.5, config.initializer_cutoff_factor)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
        next_sentence_label: Tensor | None = None,
    ) -> BertForPreTrainingOutput:
        """[B, T] -> MLM logits (as :class:`ModernBertForMaskedLM`) and NSP logits [B, 2]; the loss is the MLM
        loss plus, with ``next_sentence_label`` [B] (0 = B follows A), the NSP cross-entropy.
        ``token_type_ids`` are ignored: ModernBERT has no segment embeddings, the [SEP] tells the segments apart."""
        enc = self.model(input_ids, attention_mask, position_ids, output_hidden_states)
        hidden = enc.last_hidden_state
        logits, mlm_loss, sel = mlm_logits_and_loss(
            self.logits, hidden, labels, sparse=self.config.sparse_prediction
        )
        nsp_logits = self.nsp_classifier(self.head(hidden[:, 0]))
        return pretraining_output(logits, mlm_loss, sel, nsp_logits, next_sentence_label, enc.hidden_states)


class _ModernBertWithClassifier(ModernBertPreTrainedModel):
    """Encoder -> prediction head -> dropout -> ``classifier`` (outputs wide), the layout of every task head."""

    def __init__(self, config: ModernBertConfig, outputs: int) -> None:
        super().__init__(config)
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = kernels.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, outputs)
        self.post_init()

    def classify(self, x: Tensor) -> Tensor:
        """[..., H] -> [..., outputs]"""
        return self.classifier(self.drop(self.head(x)))

    def sequence_vector(
        self, hidden: Tensor, attention_mask: Tensor | None, first_real: bool = False
    ) -> Tensor:
        """[B, T, H] -> [B, H] by ``classifier_pooling``: the first token ("cls"; the first real one when
        ``first_real``, for left padding), or the mean over real tokens ("mean")."""
        mask = attention_mask if attention_mask is not None else hidden.new_ones(hidden.shape[:2])
        if self.config.classifier_pooling == "mean":
            return pool(hidden, mask, "mean")
        if first_real and attention_mask is not None:
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), mask.argmax(-1)]
        return hidden[:, 0]


class ModernBertForSequenceClassification(_ModernBertWithClassifier):
    """A label (or ``num_labels`` scores) per sequence from the pooled last layer."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, config.num_labels)
        self.num_labels = config.num_labels

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> SequenceClassifierOutput:
        """[B, T] -> logits [B, num_labels]; the loss by ``problem_type``, as BERT's head."""
        enc = self.model(input_ids, attention_mask, position_ids, output_hidden_states)
        logits = self.classify(self.sequence_vector(enc.last_hidden_state, attention_mask))
        loss = classification_loss(self.config, logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states)


class ModernBertForTokenClassification(_ModernBertWithClassifier):
    """A label per token."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, config.num_labels)
        self.num_labels = config.num_labels

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> TokenClassifierOutput:
        """[B, T] -> logits [B, T, num_labels]; labels -100 are ignored."""
        enc = self.model(input_ids, attention_mask, position_ids, output_hidden_states)
        logits = self.classify(enc.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, self.num_labels), labels.reshape(-1), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states)

    @staticmethod
    def decode(logits: Tensor, mask: Tensor) -> list[list[int]]:
        """logits [B, T, labels], mask [B, T] (e.g. first sub-tokens) -> each row's argmax label ids at the
        masked positions (the call BERT's token head answers, there with a CRF's Viterbi when it has one)."""
        pred = logits.argmax(-1)
        mask = mask.bool()
        return [pred[i][mask[i]].tolist() for i in range(pred.size(0))]


class ModernBertForQuestionAnswering(_ModernBertWithClassifier):
    """A start and an end score per token (the classifier is ``num_labels`` = 2 wide, as transformers')."""

    def __init__(self, config: ModernBertConfig) -> None:
        if config.id2label is None:
            config.num_labels = 2
        super().__init__(config, config.num_labels)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> QuestionAnsweringOutput:
        """[B, T] -> start_logits, end_logits [B, T]; positions outside the sequence are ignored in the loss."""
        enc = self.model(input_ids, attention_mask, position_ids, output_hidden_states)
        logits = self.classify(enc.last_hidden_state)
        start_logits, end_logits = logits[..., 0].contiguous(), logits[..., 1].contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits, hidden_states=enc.hidden_states
        )


class ModernBertForMultipleChoice(_ModernBertWithClassifier):
    """One score per choice; input [B, C, T], softmax over C. "cls" pooling reads each choice's first real
    token (left padding allowed), as transformers'."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, 1)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> MultipleChoiceOutput:
        """[B, C, T] -> logits [B, C]."""
        b, c, t = input_ids.shape

        def flat(x: Tensor | None) -> Tensor | None:
            return None if x is None else x.reshape(b * c, t)

        mask = flat(attention_mask)
        enc = self.model(flat(input_ids), mask, flat(position_ids), output_hidden_states)
        logits = self.classify(self.sequence_vector(enc.last_hidden_state, mask, first_real=True)).view(b, c)
        loss = F.cross_entropy(logits, labels.view(-1)) if labels is not None else None
        return MultipleChoiceOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states)


__all__ = [
    "ModernBertForMaskedLM",
    "ModernBertForMultipleChoice",
    "ModernBertForQuestionAnswering",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "ModernBertModel",
    "ModernBertModelOutput",
    "ModernBertPreTrainedModel",
    "rotary_inverse_frequencies",
]
