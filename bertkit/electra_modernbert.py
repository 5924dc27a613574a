"""ELECTRA pre-training (:mod:`bertkit.electra`) with ModernBERT networks.

    masked input ──▶ generator (narrow ModernBERT) ──▶ samples at the masked positions
    corrupted input (originals elsewhere) ──▶ discriminator (the ModernBERT we keep) ──▶ replaced or not

The step, its random draws and its joint loss are :class:`bertkit.electra.ElectraJointLoss`'s; only the
networks differ from the BERT pair:

- ModernBERT has no position or segment embeddings (positions are rotary), so the two networks share the
  token embedding table ``E`` [V, H] alone. The generator maps it to its width with a linear projection
  (``E W^T + b``, [V, h]) before its own LayerNorm, and its output layer is tied to that projected table, as
  ``ModernBertForMaskedLM`` ties its decoder to its token embeddings.
- The projection is linear and acts before anything else, so the generator *is* a ``ModernBertForMaskedLM``
  whose token embeddings are the projected table: :meth:`ModernBertElectraModel.save_pretrained_electra`
  writes it so, and transformers' ``ModernBertForMaskedLM`` loads it unchanged.
- A head's width stays even (the rotary embedding pairs dimensions).

A finished run's model directory:

    model/                                the discriminator, a plain ModernBERT (``ModernBertModel``)
    model/electra/generator/              the generator, a ``ModernBertForMaskedLM``
    model/electra/training.safetensors    what only training uses: the replaced-token head and the
                                          generator's projection (the saved table cannot be un-projected)

:func:`load_pretrained_modernbert_electra` reads all three back, so a run can continue from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.checkpoint import SAFETENSORS, load_state_dict, save_state_dict
from bertkit.electra import DiscriminatorHead, ElectraJointLoss, copy_weights, renamed, scaled_widths
from bertkit.errors import UserError
from bertkit.io import atomic_dir
from bertkit.modernbert import (
    ModernBertEmbeddings,
    ModernBertModel,
    ModernBertPredictionHead,
    ModernBertPreTrainedModel,
)
from bertkit.modernbert_config import ModernBertConfig

TRAINING = "training.safetensors"
# the generator's parameters here -> their names in a ModernBertForMaskedLM checkpoint
GENERATOR_NAMES = (("generator.", "model."), ("generator_head.", "head."), ("generator_decoder.", "decoder."))
PROJECTION = "generator.embeddings.tok_embeddings.project."
TABLE = "model.embeddings.tok_embeddings.weight"  # the generator's (projected) token embeddings, as saved


def modernbert_generator_config(config: ModernBertConfig, fraction: float) -> ModernBertConfig:
    """The generator's config: ``fraction`` of the discriminator's hidden size, heads and feed-forward size
    (at least one head, each of an even width); depth, attention pattern and vocabulary unchanged. Its
    output layer is always tied to its token embeddings (the shared table)."""
    hidden, heads, intermediate = scaled_widths(
        config.hidden_size, config.num_attention_heads, config.intermediate_size, fraction, head_multiple=2
    )
    generator = dataclasses.replace(
        config,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        tie_word_embeddings=True,
        architectures=None,
        extra={},
    )
    generator.validate()
    return generator


class ProjectedTokenEmbeddings(nn.Module):
    """The discriminator's token embeddings mapped to the generator's width by ``project``. The shared
    table is held, not registered, so its weights have one name."""

    def __init__(self, shared: nn.Embedding, hidden_size: int) -> None:
        super().__init__()
        self._shared = (shared,)
        self.project = nn.Linear(shared.embedding_dim, hidden_size)

    def table(self) -> Tensor:
        """The projected table, [V, generator hidden]: the generator's token embeddings as a
        ``ModernBertForMaskedLM`` holds them."""
        return self.project(self._shared[0].weight)

    def forward(self, input_ids: Tensor) -> Tensor:
        """Ids [*S] -> [*S, generator hidden] (rows of :meth:`table`, projected after the look-up)."""
        return self.project(self._shared[0](input_ids))


class TiedDecoder(nn.Module):
    """The generator's output layer: scores against the projected table (tied, as ``ModernBertForMaskedLM``'s
    decoder is to its token embeddings), plus a bias per token when the config has ``decoder_bias``."""

    def __init__(self, embeddings: ProjectedTokenEmbeddings, vocab_size: int, bias: bool) -> None:
        super().__init__()
        self._embeddings = (embeddings,)
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """[N, generator hidden] -> [N, V]"""
        return F.linear(x, self._embeddings[0].table(), self.bias)


class ModernBertElectraModel(ElectraJointLoss, ModernBertPreTrainedModel):
    """Generator + discriminator, trained together. ``config`` is the discriminator's (a ModernBERT config);
    ``generator`` the generator's when it is read from a saved run rather than scaled by the fraction."""

    def __init__(
        self,
        config: ModernBertConfig,
        generator_fraction: float = 0.25,
        generator: ModernBertConfig | None = None,
        **step: Any,
    ) -> None:
        """``step``: :meth:`ElectraJointLoss.set_step`'s settings."""
        super().__init__(config)
        self.generator_fraction = float(generator_fraction)
        self.set_step(**step)
        self.generator_config = generator or modernbert_generator_config(config, generator_fraction)
        g = self.generator_config

        self.discriminator = ModernBertModel(config)
        self.discriminator_predictions = DiscriminatorHead(config.hidden_size, config.hidden_activation)
        self.generator = ModernBertModel(g)
        self.generator.embeddings.tok_embeddings = ProjectedTokenEmbeddings(
            self.discriminator.embeddings.tok_embeddings, g.hidden_size
        )
        self.generator_head = ModernBertPredictionHead(g)
        self.generator_decoder = TiedDecoder(
            self.generator.embeddings.tok_embeddings, config.vocab_size, g.decoder_bias
        )
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """ModernBERT's initialisation; the linear layers only ELECTRA has (the projection and the
        replaced-token head) as ModernBERT's layers that read the residual stream."""
        if isinstance(module, (ProjectedTokenEmbeddings, DiscriminatorHead)):
            std, cut = self.config.initializer_range, self.config.initializer_cutoff_factor
            for layer in module.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.trunc_normal_(layer.weight, std=std, a=-cut * std, b=cut * std)
                    nn.init.zeros_(layer.bias)
        elif not isinstance(module, ModernBertEmbeddings) or module is self.discriminator.embeddings:
            super()._init_weights(module)  # (the generator's embeddings are the shared table, set once)

    def generator_scores(self, hidden: Tensor) -> Tensor:
        return self.generator_decoder(self.generator_head(hidden))

    # ------------------------------------------------------------------ saving
    def save_run(self, model_dir: str | Path) -> list[Path]:
        self.save_pretrained_modernbert(model_dir)
        return [Path(model_dir), self.save_pretrained_electra(Path(model_dir) / "electra")]

    def save_pretrained_modernbert(self, model_dir: str | Path) -> None:
        """The discriminator's encoder as a plain ModernBERT folder: ``ModernBertModel.from_pretrained`` in
        bertkit or transformers loads it, and every ModernBERT command takes it."""
        self.discriminator.save_pretrained(model_dir)

    def save_pretrained_electra(self, out_dir: str | Path) -> Path:
        """``OUT/generator`` (a ``ModernBertForMaskedLM`` folder, its token embeddings the projected table) and
        ``OUT/training.safetensors`` (the replaced-token head and the projection); returns the generator's
        folder."""
        out_dir = Path(out_dir)
        state = self.state_dict()
        generator = renamed(state, list(GENERATOR_NAMES), skip=(PROJECTION,))
        with torch.no_grad():
            generator[TABLE] = self.generator.embeddings.tok_embeddings.table()
        training = {
            k: v for k, v in state.items() if k.startswith(("discriminator_predictions.", PROJECTION))
        }
        config = dataclasses.replace(self.generator_config, architectures=["ModernBertForMaskedLM"])
        with atomic_dir(out_dir / "generator") as tmp:
            config.save_pretrained(tmp)
            save_state_dict(generator, tmp / SAFETENSORS)
        save_state_dict(training, out_dir / TRAINING)
        return out_dir / "generator"


def load_pretrained_modernbert_electra(model_dir: str | Path, **step: Any) -> ModernBertElectraModel:
    """Both networks back from a finished run's model directory (to continue pre-training): the
    discriminator from ``DIR``, the generator from ``DIR/electra/generator`` and the rest from
    ``DIR/electra/training.safetensors``, as this module writes them; ``step``:
    :meth:`ElectraJointLoss.set_step`'s settings."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    electra = model_dir / "electra"
    for path in (electra / "generator" / "config.json", electra / TRAINING):
        if not path.is_file():
            raise UserError(f"{path}: not found; continuing ELECTRA needs the run's model/electra/ folder")
    config = ModernBertConfig.from_pretrained(model_dir)
    generator = ModernBertConfig.from_pretrained(electra / "generator")
    model = ModernBertElectraModel(config, generator.hidden_size / config.hidden_size, generator, **step)
    state = {"discriminator." + k: v for k, v in load_state_dict(model_dir).items()}
    theirs = [(t, o) for o, t in GENERATOR_NAMES]  # the table is left out: derived
    state.update(renamed(load_state_dict(electra / "generator"), theirs, skip=(TABLE,)))
    state.update(load_file(str(electra / TRAINING)))
    return copy_weights(model, state, electra)


__all__ = [
    "ModernBertElectraModel",
    "ProjectedTokenEmbeddings",
    "TiedDecoder",
    "load_pretrained_modernbert_electra",
    "modernbert_generator_config",
]
