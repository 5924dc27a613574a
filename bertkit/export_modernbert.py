"""ModernBERT's padded (mask-based) computation over a bertkit model's modules, for the ONNX export.

BERT's export traces the model itself (:class:`bertkit.export.BertGraph`); ModernBERT's traces this: plain
tensor operations a trace records with dynamic batch and sequence axes (no packing, no block-by-block attention, whose branches on the length a trace would freeze).
The local layers' window is a dense [T, T] additive mask here, built from the traced length. Inputs are
``input_ids`` and ``attention_mask`` (ModernBERT has no segment ids)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .errors import UserError
from .modernbert import ModernBertModel, rotate_queries_and_keys
from .pooling import pool

INPUT_NAMES = ["input_ids", "attention_mask"]


class StaticModernBert(nn.Module):
    """Outputs: encoder -> (last_hidden_state,); MLM, sequence or token classification -> (logits,);
    QA -> (start_logits, end_logits)."""

    input_names = INPUT_NAMES

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.encoder: ModernBertModel = model if isinstance(model, ModernBertModel) else model.model
        self.kind = type(model).__name__
        if self.kind not in self._outputs():
            raise UserError(f"ONNX export of {self.kind} is not supported; use --head encoder")

    @staticmethod
    def _outputs() -> dict[str, list[str]]:
        return {
            "ModernBertModel": ["last_hidden_state"],
            "ModernBertForMaskedLM": ["logits"],
            "ModernBertForSequenceClassification": ["logits"],
            "ModernBertForTokenClassification": ["logits"],
            "ModernBertForQuestionAnswering": ["start_logits", "end_logits"],
        }

    def output_names(self) -> list[str]:
        return self._outputs()[self.kind]

    def encode(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """[B, T] ids and mask -> last hidden state [B, T, H]."""
        enc = self.encoder
        config = enc.config
        x = enc.embeddings(input_ids)
        idx = torch.arange(input_ids.shape[1], device=input_ids.device)
        rotary = {g: enc.rotary_emb(idx[None], g, x.dtype) for g in (True, False)}
        lowest = torch.finfo(x.dtype).min
        keys = attention_mask[:, None, None, :].bool()  # [B, 1, 1, T]
        distance = (idx[:, None] - idx[None, :]).abs()
        # additive masks, 0 = may attend; a local query always sees itself (see kernels.local_attention)
        allowed = {True: keys, False: (distance <= config.window) & (keys | (distance == 0))}
        bias = {g: torch.zeros((), dtype=x.dtype).masked_fill(~a, lowest) for g, a in allowed.items()}
        heads, d = config.num_attention_heads, config.head_dim
        for layer in enc.layers:
            attn, g = layer.attn, layer.attn.is_global
            qkv = rotate_queries_and_keys(attn.Wqkv(layer.attn_norm(x)), *rotary[g], heads)
            b, t, _ = qkv.shape
            q, k, v = qkv.view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)  # [B, A, T, d]
            scores = torch.matmul(q, k.transpose(-1, -2)) * d**-0.5 + bias[g]
            ctx = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(b, t, heads * d)
            x = x + attn.Wo(ctx)
            x = x + layer.mlp(layer.mlp_norm(x))
        return enc.final_norm(x)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        x = self.encode(input_ids, attention_mask)
        m = self.model
        if self.kind == "ModernBertModel":
            return (x,)
        if self.kind == "ModernBertForMaskedLM":
            return (m.decoder(m.head(x)),)
        if self.kind == "ModernBertForSequenceClassification":
            pooled = pool(x, attention_mask, "mean") if m.config.classifier_pooling == "mean" else x[:, 0]
            return (m.classifier(m.head(pooled)),)
        logits = m.classifier(m.head(x))
        if self.kind == "ModernBertForTokenClassification":
            return (logits,)
        return logits[..., 0], logits[..., 1]


__all__ = ["INPUT_NAMES", "StaticModernBert"]
