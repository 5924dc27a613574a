"""The interface every pre-training objective implements.

An objective owns what differs between ways of pre-training: the instances it reads (sentence pairs with a
next-sentence label, or single segments, packed within or across documents), the model(s) it trains, the loss
and metrics of a batch, and what it writes into ``RUN_DIR/model``. The driver (:mod:`bertkit.pretrain`) owns the
rest - data loading, the optimizer and schedule, checkpoints, distributed training - and never looks at the
objective's name.

Adding an objective is one module with a subclass of :class:`Objective`, one line in
:data:`bertkit.objectives.REGISTRY`, and its tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor, nn

from bertkit.config import BertConfig
from bertkit.errors import UserError

# (numerator, denominator) pairs, summed over batches before dividing (see heads.pretraining_metrics)
Metrics = dict[str, tuple[float, float]]


class Objective:
    """One way of pre-training. Subclasses set the class attributes and override the methods below.

    ``options`` are the objective's own settings (``[objective_options]`` in a run config, or
    ``--objective-option KEY=VALUE``), checked against :attr:`option_defaults`.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # The data stream: two segments with a next-sentence label, or one segment per instance.
    next_sentence: ClassVar[bool] = False
    # One segment of whole sentences packed up to the window across document boundaries (a [SEP] between
    # documents), as RoBERTa's FULL-SENTENCES, instead of one document per instance.
    pack_documents: ClassVar[bool] = False
    # Settings filled in before the recipe's when the run leaves them unset (e.g. the masking rate).
    setting_defaults: ClassVar[dict[str, Any]] = {}
    # The objective's own options and their defaults; their types are the defaults' types.
    option_defaults: ClassVar[dict[str, Any]] = {}
    # Parameters that get no gradient from some batches (DDP must be told).
    find_unused_parameters: ClassVar[bool] = True

    def __init__(
        self, options: dict[str, Any] | None = None, pad_token_id: int = 0, mask_token_id: int = 103
    ):
        self.options = self.check_options(options or {})
        self.pad_token_id = int(pad_token_id)
        self.mask_token_id = int(mask_token_id)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options with defaults filled in; an unknown option or a value of the wrong type is a UserError."""
        unknown = sorted(set(options) - set(cls.option_defaults))
        if unknown:
            known = ", ".join(sorted(cls.option_defaults)) or "none"
            raise UserError(f"objective {cls.name}: unknown option(s) {unknown}; it takes: {known}")
        out = dict(cls.option_defaults)
        for key, value in options.items():
            want = type(cls.option_defaults[key])
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, want) or isinstance(value, bool) != (want is bool):
                raise UserError(
                    f"objective {cls.name}: option {key} must be a {want.__name__}, not {value!r}"
                )
            out[key] = value
        return out

    def configure(self, config: BertConfig) -> None:
        """Adjust the model config before the model is built (e.g. a causal flag that fine-tuning keeps)."""

    def build_model(self, config: BertConfig, init_from: str | None = None) -> nn.Module:
        """The module the trainer optimises (weights from ``init_from``, a saved model dir, when given)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Metrics]:
        """``(loss, metrics)`` of one batch (input_ids/attention_mask/token_type_ids/labels [B, T], and
        next_sentence_label [B] when :attr:`next_sentence`). ``model`` may be wrapped (DDP)."""
        raise NotImplementedError

    def save(self, model: nn.Module, model_dir: Path) -> None:
        """Write the trained weights into ``model_dir`` (the driver adds the tokenizer and the model card)."""
        model.save_pretrained(model_dir)

    def card_title(self, architecture: str) -> str:
        """The model card's title; ``architecture``: the saved model's, as people write it ("BERT",
        "ModernBERT")."""
        return f"A {architecture} pre-trained with bertkit ({self.name})"


def forward_batch(model: nn.Module, batch: dict[str, Tensor], **extra: Any) -> Any:
    """``model`` on a batch's input_ids, attention_mask, token_type_ids and labels, and ``extra`` keywords."""
    return model(
        input_ids=batch["input_ids"],
        attention_mask=batch.get("attention_mask"),
        token_type_ids=batch.get("token_type_ids"),
        labels=batch["labels"],
        **extra,
    )
