"""BertConfig: the model's hyper-parameters under the names Hugging Face's ``config.json`` uses.

A config read from a checkpoint directory round-trips: keys bertkit does not use are kept in
``extra`` and written back, so a saved model stays loadable by transformers. The reading, writing and
label-map machinery lives in :class:`HFConfig`, which other architectures' configs share
(:mod:`bertkit.modernbert_config`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .bert_family import BERT_TYPES, member_of
from .errors import UserError
from .io import atomic_write_json, read_json

logger = logging.getLogger("bertkit")

# (layers, hidden, heads) of the paper's sizes and the small sizes released with "Well-Read Students".
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")

# Keys transformers writes that carry no meaning for bertkit; kept silently.
_KNOWN_PASSTHROUGH = {
    "transformers_version",
    "_name_or_path",
    "torch_dtype",
    "dtype",
    "use_cache",
    "gradient_checkpointing",
    "output_past",
    "architectures",
}


C = TypeVar("C", bound="HFConfig")


def read_config_json(path: Path, what: str = "model") -> dict[str, Any]:
    """The JSON object in ``path``; UserError naming the file (and line) when it is missing or not an object."""
    data = read_json(path, "config file")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object of {what} settings")
    return data


class HFConfig:
    """What every config of a Hugging Face-layout model shares: the label maps, and reading and writing
    ``config.json`` with unknown keys kept in ``extra``. Subclasses are dataclasses with the fields
    ``id2label``, ``problem_type``, ``architectures`` and ``extra`` besides their own, and a ``validate``."""

    what: ClassVar[str] = "model"  # what the settings describe, for error messages
    id2label: dict[int, str] | None
    architectures: list[str] | None
    extra: dict[str, Any]

    hidden_size: int
    num_attention_heads: int

    def __post_init__(self) -> None:  # run by the subclasses' dataclass __init__
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
        self.validate()

    def validate(self) -> None:
        raise NotImplementedError

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # ----------------------------------------------------------------- labels
    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    @num_labels.setter
    def num_labels(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"num_labels must be >= 1, got {n}")
        if self.id2label is None or len(self.id2label) != n:
            self.id2label = {i: f"LABEL_{i}" for i in range(n)}

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in (self.id2label or {0: "LABEL_0", 1: "LABEL_1"}).items()}

    # ---------------------------------------------------------------- JSON IO
    @classmethod
    def _read_keys(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Hook: translate keys another writer of config.json uses into this class's fields."""
        return data

    def _written_keys(self) -> dict[str, Any]:
        """Hook: keys derived from the fields that config.json also carries for other readers."""
        return {}

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Build from a config.json dict; unknown keys go to ``extra``, ``num_labels`` sets the label map."""
        data = cls._read_keys(dict(data))
        num_labels = data.pop("num_labels", None)
        data.pop("label2id", None)  # derived from id2label
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}  # type: ignore[arg-type]
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        extra.update(data.get("extra", {}) if isinstance(data.get("extra"), dict) else {})
        extra.pop("extra", None)
        unexpected = sorted(set(extra) - _KNOWN_PASSTHROUGH)
        if unexpected:
            logger.debug("config keys kept but not used by bertkit: %s", ", ".join(unexpected))
        config = cls(**known, extra=extra)
        if num_labels is not None:
            config.num_labels = int(num_labels)
        return config

    @classmethod
    def from_json_file(cls: type[C], path: str | os.PathLike) -> C:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        data = read_config_json(path, cls.what)
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as e:
            raise UserError(f"{path}: {e}") from None

    @classmethod
    def from_pretrained(cls: type[C], model_dir: str | os.PathLike) -> C:
        return cls.from_json_file(Path(model_dir) / "config.json")

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict that transformers reads (label maps with string keys, extra keys restored)."""
        out: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in ("extra", "id2label"):
                continue
            out[f.name] = getattr(self, f.name)
        out.update(self._written_keys())
        if out.get("architectures") is None:
            out.pop("architectures", None)
        if self.id2label is not None:
            out["id2label"] = {str(k): v for k, v in sorted(self.id2label.items())}
            out["label2id"] = {v: k for k, v in sorted(self.id2label.items())}
        return out

    def to_json_file(self, path: str | os.PathLike) -> None:
        atomic_write_json(path, self.to_dict())

    def save_pretrained(self, model_dir: str | os.PathLike) -> None:
        self.to_json_file(Path(model_dir) / "config.json")


@dataclass
class BertConfig(HFConfig):
    """Hyper-parameters of a BERT encoder and its heads (field names are config.json's)."""

    what: ClassVar[str] = "BERT"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    classifier_dropout: float | None = None
    # ELECTRA's factorised embeddings: this width, then a linear map up to hidden_size (None: hidden_size)
    embedding_size: int | None = None
    model_type: str = "bert"
    # Head settings (HF stores the label maps; num_labels is derived from them).
    id2label: dict[int, str] | None = None
    problem_type: str | None = None
    architectures: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise ValueError naming the field and the fix for any impossible setting."""
        if self.model_type not in BERT_TYPES:  # first: another architecture's sizes mean nothing here
            raise ValueError(
                f"model_type {self.model_type!r} is not an architecture bertkit runs (it runs "
                f"{', '.join(BERT_TYPES[:-1])}, {BERT_TYPES[-1]} and modernbert)"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); choose heads that divide it (e.g. hidden_size/64 heads)"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {p}")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(
                f"BertConfig.classifier_dropout must be in [0, 1) or null, got {self.classifier_dropout}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"BertConfig.hidden_act {self.hidden_act!r} is not supported; use one of {ACTIVATIONS}"
            )
        if self.position_embedding_type != "absolute":
            raise ValueError(
                f"BertConfig.position_embedding_type {self.position_embedding_type!r} is not supported; "
                "bertkit implements the paper's learned absolute positions ('absolute')"
            )
        if self.initializer_range <= 0 or self.layer_norm_eps <= 0:
            raise ValueError("BertConfig.initializer_range and layer_norm_eps must be positive")
        if self.embedding_size is not None and (
            not isinstance(self.embedding_size, int)
            or isinstance(self.embedding_size, bool)
            or self.embedding_size <= 0
        ):
            raise ValueError(
                f"BertConfig.embedding_size must be a positive integer or null, got {self.embedding_size!r}"
            )
        if self.max_tokens <= 0:
            raise ValueError(
                f"BertConfig.max_position_embeddings {self.max_position_embeddings} leaves no position after "
                f"RoBERTa's offset ({self.position_offset}: positions start after pad_token_id)"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"BertConfig.pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})"
            )

    @classmethod
    def _read_keys(cls, data: dict[str, Any]) -> dict[str, Any]:
        member = member_of(data.get("model_type"))
        for (
            theirs,
            ours,
        ) in member.config_keys:  # e.g. DistilBERT's own names for BERT's sizes (bert_family.py)
            if theirs in data:
                data.setdefault(ours, data.pop(theirs))
        for key, value in member.config_defaults:
            data.setdefault(key, value)
        return data

    def _written_keys(self) -> dict[str, Any]:
        return {theirs: getattr(self, ours) for theirs, ours in member_of(self.model_type).config_keys}

    @property
    def embedding_width(self) -> int:
        """The width of the token, position and segment embeddings (``embedding_size``, else ``hidden_size``)."""
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.embedding_size is None:  # BERT's config.json as it always was
            out.pop("embedding_size")
        return out

    # ---------------------------------------------------------------- positions
    @property
    def position_offset(self) -> int:
        """The position id of the first token: 0 for BERT, ``pad_token_id + 1`` for a RoBERTa checkpoint
        (whose positions start after the padding id; see :mod:`bertkit.bert_family`)."""
        return self.pad_token_id + 1 if member_of(self.model_type).offset_positions else 0

    @property
    def max_tokens(self) -> int:
        """The longest input the position table holds (512 for BERT and RoBERTa alike)."""
        return self.max_position_embeddings - self.position_offset

    # ---------------------------------------------------------------- presets
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BertConfig:
        """A named size (tiny, mini, small, medium, base, large) with intermediate = 4 * hidden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        values: dict[str, Any] = dict(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=4 * hidden,
        )
        values.update(overrides)
        return cls.from_dict(values)
