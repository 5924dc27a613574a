"""ELECTRA's replaced-token detection (Clark et al., 2020) as a pre-training objective; the networks are in
:mod:`bertkit.electra` (BERT) and :mod:`bertkit.electra_modernbert` (ModernBERT, picked by the model config)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit.config import BertConfig
from bertkit.electra import ElectraPretrainingModel, load_pretrained_electra
from bertkit.errors import UserError
from bertkit.objective_names import OBJECTIVES
from bertkit.objectives.base import Metrics, Objective, forward_batch


class Electra(Objective):
    name = "electra"
    summary = OBJECTIVES[name]
    # ELECTRA-Small/Base mask 15% of the tokens (the cpu recipe's 40% is for the masked LM's sake).
    setting_defaults = {"masked_lm_prob": 0.15}
    option_defaults = {
        "generator_fraction": 0.25,  # the generator's width / the discriminator's (the paper: 1/4 to 1/2)
        "discriminator_weight": 50.0,  # λ of the joint loss
        "mask_token_prob": 0.85,  # masked positions the generator sees as [MASK]; the rest keep the token
    }

    def build_model(self, config: BertConfig, init_from: str | None = None) -> nn.Module:
        from bertkit.architectures import is_modernbert
        from bertkit.electra_modernbert import ModernBertElectraModel, load_pretrained_modernbert_electra
        from bertkit.modernbert_config import ModernBertConfig

        modernbert = isinstance(config, ModernBertConfig) or bool(init_from and is_modernbert(init_from))
        if not modernbert and not isinstance(config, BertConfig):
            raise UserError(
                f"objective electra builds BERT or ModernBERT networks, not from a {type(config).__name__}"
            )
        shared = {k: self.options[k] for k in ("mask_token_prob", "discriminator_weight")}
        if init_from and modernbert:  # a finished ELECTRA run's model dir: both networks
            return load_pretrained_modernbert_electra(init_from, mask_token_id=self.mask_token_id, **shared)
        if init_from:  # both networks from its electra/ folders
            return load_pretrained_electra(
                Path(init_from) / "electra", mask_token_id=self.mask_token_id, **shared
            )
        fraction = self.options["generator_fraction"]
        if not 0.0 < fraction <= 1.0:
            raise UserError(f"objective electra: generator_fraction must be in (0, 1], not {fraction}")
        if self.options["discriminator_weight"] < 0:
            raise UserError("objective electra: discriminator_weight must be >= 0")
        if not 0.0 <= self.options["mask_token_prob"] <= 1.0:
            raise UserError("objective electra: mask_token_prob must be in [0, 1]")
        network = ModernBertElectraModel if modernbert else ElectraPretrainingModel
        return network(config, mask_token_id=self.mask_token_id, **self.options)

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Metrics]:
        out = forward_batch(model, batch)
        with torch.no_grad():
            n = float(out.generator_labels.numel())
            tokens = float(out.real.sum())
            metrics: Metrics = {
                "discriminator_loss": (float(out.discriminator_loss) * tokens, tokens),
                "replaced_token_accuracy": (
                    float(((out.discriminator_logits > 0) == out.replaced)[out.real].sum()),
                    tokens,
                ),
                "replaced_share": (float(out.replaced.sum()), tokens),
            }
            if n:
                correct = float((out.generator_logits.argmax(-1) == out.generator_labels).sum())
                metrics["masked_lm_loss"] = (float(out.generator_loss) * n, n)
                metrics["masked_lm_accuracy"] = (correct, n)
        return out.loss, metrics

    def save(self, model: nn.Module, model_dir: Path) -> list[Path]:
        return model.save_run(model_dir)

    def card_title(self, architecture: str) -> str:
        return f"A {architecture} encoder pre-trained with bertkit as ELECTRA's discriminator"
