"""ModernBertConfig: ModernBERT's hyper-parameters under the names its ``config.json`` uses.

The released checkpoints (and transformers before version 5) describe the attention pattern and the rotary
bases with ``global_attn_every_n_layers``, ``local_attention``, ``global_rope_theta`` and ``local_rope_theta``;
transformers 5 writes the same facts a second time as ``layer_types`` (one of ``"full_attention"`` /
``"sliding_attention"`` per layer) and ``rope_parameters`` (a rotary base per layer type). Both spellings are
read; both are written, consistent with each other, so every transformers version reads a saved folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .config import HFConfig

GLOBAL, LOCAL = "full_attention", "sliding_attention"  # transformers' names of the two layer types
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")  # bertkit.model.ACT2FN
POOLINGS = ("cls", "mean")


def _period_of(layer_types: list[Any], where: str = "layer_types") -> int:
    """The n of "layer i is global when i % n == 0" that ``layer_types`` follows; ValueError if none does."""
    if not layer_types or any(t not in (GLOBAL, LOCAL) for t in layer_types):
        raise ValueError(f"{where} must be a non-empty list of {GLOBAL!r} / {LOCAL!r}, got {layer_types!r}")
    n_layers = len(layer_types)
    for n in range(1, n_layers + 1):  # the smallest period that fits; only layer 0 global -> n = n_layers
        if all((t == GLOBAL) == (i % n == 0) for i, t in enumerate(layer_types)):
            return n
    raise ValueError(
        f"{where} {layer_types!r} is not 'layer 0 global, then every n-th layer'; bertkit's ModernBERT "
        "takes that pattern only (global_attn_every_n_layers)"
    )


def _rope_theta(params: Any, layer_type: str) -> float | None:
    """The rotary base rope_parameters gives ``layer_type`` (None when it gives none)."""
    if not isinstance(params, dict) or not isinstance(params.get(layer_type), dict):
        return None
    entry = params[layer_type]
    if entry.get("rope_type", "default") != "default":
        raise ValueError(
            f"rope_parameters.{layer_type}.rope_type {entry['rope_type']!r} is not supported; bertkit's "
            "ModernBERT implements the plain rotary embedding ('default')"
        )
    return entry.get("rope_theta")


@dataclass
class ModernBertConfig(HFConfig):
    """Hyper-parameters of a ModernBERT encoder and its heads (field names are config.json's).

    ``local_attention`` is the sliding window's full width: a token in a local layer sees the tokens at
    distance <= local_attention // 2 on either side. Layer i is global (attends everywhere) when
    ``i % global_attn_every_n_layers == 0``, so layer 0 is always global."""

    what: ClassVar[str] = "ModernBERT"

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int | None = 50283
    eos_token_id: int | None = 50282
    bos_token_id: int | None = 50281
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    attention_bias: bool = False
    attention_dropout: float = 0.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False
    sparse_pred_ignore_index: int = -100
    model_type: str = "modernbert"
    id2label: dict[int, str] | None = None
    problem_type: str | None = None
    architectures: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def max_tokens(self) -> int:
        """The longest input (rotary positions: the configured context)."""
        return self.max_position_embeddings

    @property
    def window(self) -> int:
        """How far a local layer's token sees on each side (transformers' ``sliding_window``)."""
        return self.local_attention // 2

    def is_global(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) attends over the whole sequence."""
        return layer % self.global_attn_every_n_layers == 0

    @property
    def layer_types(self) -> list[str]:
        return [GLOBAL if self.is_global(i) else LOCAL for i in range(self.num_hidden_layers)]

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise ValueError naming the field and the limit for any impossible setting."""
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
            "global_attn_every_n_layers",
            "local_attention",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModernBertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads or self.head_dim % 2:
            raise ValueError(
                f"ModernBertConfig.hidden_size ({self.hidden_size}) must be num_attention_heads "
                f"({self.num_attention_heads}) times an even head size (the rotary embedding pairs dimensions)"
            )
        for name in ("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"):
            p = getattr(self, name)
            if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
                raise ValueError(f"ModernBertConfig.{name} must be in [0, 1), got {p!r}")
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ValueError(
                    f"ModernBertConfig.{name} {getattr(self, name)!r} is not supported; use one of {ACTIVATIONS}"
                )
        if self.classifier_pooling not in POOLINGS:
            raise ValueError(
                f"ModernBertConfig.classifier_pooling must be one of {POOLINGS}, got {self.classifier_pooling!r}"
            )
        for name in ("global_rope_theta", "local_rope_theta", "norm_eps", "initializer_range"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"ModernBertConfig.{name} must be a positive number, got {value!r}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"ModernBertConfig.pad_token_id {self.pad_token_id} is outside the vocabulary "
                f"(size {self.vocab_size})"
            )

    # ---------------------------------------------------------------- JSON IO
    @classmethod
    def _read_keys(cls, data: dict[str, Any]) -> dict[str, Any]:
        """transformers 5's ``layer_types`` / ``rope_parameters`` into the classic fields (which they win over:
        transformers 5 builds its model from them)."""
        layer_types = data.pop("layer_types", None)
        if layer_types is not None:
            if not isinstance(layer_types, list):
                raise ValueError(f"layer_types must be a list, got {layer_types!r}")
            if "num_hidden_layers" in data and data["num_hidden_layers"] != len(layer_types):
                raise ValueError(
                    f"layer_types lists {len(layer_types)} layers but num_hidden_layers is "
                    f"{data['num_hidden_layers']}"
                )
            data.setdefault("num_hidden_layers", len(layer_types))
            n = data.get("global_attn_every_n_layers")
            fits = (
                isinstance(n, int)
                and n > 0
                and all((t == GLOBAL) == (i % n == 0) for i, t in enumerate(layer_types))
            )
            if not fits:  # the classic key absent or out of date: the list is what transformers 5 builds from
                data["global_attn_every_n_layers"] = _period_of(layer_types)
        params = data.pop("rope_parameters", None)
        for layer_type, name in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
            theta = _rope_theta(params, layer_type)
            if theta is not None:
                data[name] = float(theta)
        if data.get("rope_scaling") is not None:
            raise ValueError(
                "rope_scaling is not supported by bertkit's ModernBERT (plain rotary embedding only)"
            )
        data.pop("rope_scaling", None)
        return data

    def _written_keys(self) -> dict[str, Any]:
        return {
            "layer_types": self.layer_types,
            "rope_parameters": {
                GLOBAL: {"rope_theta": float(self.global_rope_theta), "rope_type": "default"},
                LOCAL: {"rope_theta": float(self.local_rope_theta), "rope_type": "default"},
            },
        }


__all__ = ["ModernBertConfig"]
