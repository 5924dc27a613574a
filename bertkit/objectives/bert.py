"""The paper's objectives: masked LM + next sentence prediction, and its two ablations (Devlin et al., 2019,
Table 5): "No NSP" (masked LM on single segments) and "LTR & No NSP" (a left-to-right LM)."""

from __future__ import annotations

from torch import Tensor, nn

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.heads.pretraining import BertForPreTraining, ltr_batch, pretraining_metrics
from bertkit.objective_names import OBJECTIVES
from bertkit.objectives.base import Metrics, Objective, forward_batch


class _BertObjective(Objective):
    """The objectives that train ``BertForPreTraining`` and save it in the Hugging Face BERT layout; the masked
    LM ones (:attr:`modernbert`) also train ModernBERT when the config is a ModernBERT one
    (``ModernBertForMaskedLM``; ``ModernBertForPreTraining`` with NSP)."""

    modernbert: bool = False  # whether the objective runs on ModernBERT (which has no causal mask)

    def build_model(self, config: BertConfig, init_from: str | None = None) -> nn.Module:
        from bertkit.architectures import is_modernbert
        from bertkit.modernbert_config import ModernBertConfig

        if isinstance(config, ModernBertConfig) or (init_from and is_modernbert(init_from)):
            if not self.modernbert:
                raise UserError(
                    f"objective {self.name} needs BERT's heads; a ModernBERT model pre-trains with mlm, roberta "
                    "or mlm+nsp"
                )
            from bertkit.modernbert import ModernBertForMaskedLM, ModernBertForPreTraining

            cls = ModernBertForPreTraining if self.next_sentence else ModernBertForMaskedLM
            loading = {"sparse_prediction": True}
        else:
            cls, loading = BertForPreTraining, {}
        if init_from:  # a masked-LM folder continued with NSP starts its NSP classifier fresh
            return cls.from_pretrained(init_from, **loading).train()
        return cls(config)


class MaskedLMNextSentence(_BertObjective):
    name = "mlm+nsp"
    summary = OBJECTIVES[name]
    next_sentence = True
    modernbert = True  # NSP on ModernBERT: bertkit.modernbert.ModernBertForPreTraining
    find_unused_parameters = False

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Metrics]:
        nsp = batch.get("next_sentence_label")
        out = forward_batch(model, batch, next_sentence_label=nsp)
        return out.loss, pretraining_metrics(out, next_sentence_label=nsp)


class MaskedLM(_BertObjective):
    name = "mlm"
    summary = OBJECTIVES[name]
    modernbert = True

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Metrics]:
        out = forward_batch(model, batch)
        return out.loss, pretraining_metrics(out)


class LeftToRight(_BertObjective):
    name = "ltr"
    summary = OBJECTIVES[name]

    def configure(self, config: BertConfig) -> None:
        # written into model/config.json: the fine-tuning heads keep the causal mask (the paper's LTR model)
        config.extra["causal"] = True

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Metrics]:
        batch = ltr_batch(batch, self.pad_token_id)
        out = forward_batch(model, batch, causal=True)
        return out.loss, pretraining_metrics(out)
