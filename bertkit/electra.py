"""ELECTRA pre-training (Clark et al., 2020): a small generator fills masked positions, a discriminator learns
to tell which tokens were replaced.

    masked input ──▶ generator (narrow BERT) ──▶ samples at the masked positions
    corrupted input (originals elsewhere) ──▶ discriminator (the BERT we keep) ──▶ replaced or not, per token
    loss = generator MLM loss + λ · replaced-token-detection loss       (λ = 50 in the paper)

The discriminator learns from every real position instead of the 15% that are masked, which is why ELECTRA
gets more out of the same compute. After pre-training the generator is thrown away and the discriminator is
an ordinary BERT encoder: :meth:`ElectraPretrainingModel.save_pretrained_bert` writes it in the BERT layout
(``finetune``, ``serve``, ``embed`` and ``distill`` take it unchanged), and :meth:`save_pretrained_electra`
writes both networks in transformers' ELECTRA layout (``ElectraForPreTraining`` / ``ElectraForMaskedLM``).

The two networks share the embedding layer (token, position and segment embeddings and their LayerNorm, as
the original code does); the generator is ``generator_fraction`` of the discriminator's width (hidden size,
heads and feed-forward size) and projects the shared embeddings down to its width first. Its output layer is
tied to the shared token embeddings. Replacements are drawn from the generator's softmax (by inverse CDF:
:func:`sample_rows`) with torch's generator, which the trainer seeds from the run's seed and saves with every checkpoint, so a resumed
run draws what the uninterrupted run drew.

The step itself (:class:`ElectraJointLoss`) is the architecture's business only through the two networks'
logits; :mod:`bertkit.electra_modernbert` trains a ModernBERT pair with it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit import kernels
from bertkit.checkpoint import save_state_dict
from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.heads.pretraining import IGNORE_INDEX, _Output
from bertkit.io import atomic_dir, atomic_write_json
from bertkit.model import ACT2FN, BertEmbeddings, BertModel, gelu
from bertkit.modeling_utils import BertPreTrainedModel

SAFETENSORS = "model.safetensors"
M = TypeVar("M", bound=BertPreTrainedModel)


def scaled_widths(
    hidden: int, heads: int, intermediate: int, fraction: float, head_multiple: int = 1
) -> tuple[int, int, int]:
    """``(hidden, heads, intermediate)`` scaled by ``fraction``: at least one head, each head's width a whole
    multiple of ``head_multiple`` (2 for rotary positions, which pair dimensions) and at least that."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"generator_fraction must be in (0, 1], got {fraction}")
    heads = max(1, round(heads * fraction))
    unit = heads * head_multiple
    width = max(unit, round(hidden * fraction))
    width -= width % unit  # a whole number of units per head
    return width, heads, max(1, round(intermediate * fraction))


def generator_config(config: BertConfig, fraction: float) -> BertConfig:
    """The generator's config: ``fraction`` of the discriminator's hidden size, heads and feed-forward size
    (at least one head of at least one unit); depth, vocabulary and positions unchanged."""
    hidden, heads, intermediate = scaled_widths(
        config.hidden_size, config.num_attention_heads, config.intermediate_size, fraction
    )
    return dataclasses.replace(
        config,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        extra={},
        embedding_size=None,  # its embeddings are the discriminator's, projected (ProjectedEmbeddings)
    )


class ProjectedEmbeddings(nn.Module):
    """The discriminator's embedding layer, then a linear map down to the generator's width (transformers'
    ``embeddings_project``). The shared layer is held, not registered, so its weights have one name."""

    def __init__(self, shared: BertEmbeddings, hidden_size: int) -> None:
        super().__init__()
        self._shared = (shared,)
        self.project = nn.Linear(shared.word_embeddings.embedding_dim, hidden_size)

    @property
    def position_ids(self) -> Tensor:
        return self._shared[0].position_ids

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        """Ids of shape S -> [*S, generator hidden]."""
        return self.project(self._shared[0](input_ids, token_type_ids, position_ids))


class DiscriminatorHead(nn.Module):
    """dense -> activation -> one logit per token: is this token a replacement?"""

    def __init__(self, hidden_size: int, activation: str) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = ACT2FN[activation]
        self.dense_prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden: Tensor) -> Tensor:
        """[B, T, H] -> [B, T]"""
        return self.dense_prediction(self.activation(self.dense(hidden))).squeeze(-1)


class GeneratorHead(nn.Module):
    """dense (generator width -> embedding width) -> GELU -> LayerNorm, before the tied output layer."""

    def __init__(self, generator: BertConfig, embedding_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(generator.hidden_size, embedding_size)
        self.LayerNorm = nn.LayerNorm(embedding_size, eps=generator.layer_norm_eps)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.LayerNorm(gelu(self.dense(hidden)))


def sample_rows(probs: Tensor, block: int = 256) -> Tensor:
    """probs [N, V] (each row a distribution, maybe unnormalised) -> [N]: one column per row, drawn by inverse
    CDF: a uniform per row against the row's cumulative sum. One random number per row, where Gumbel-max draws
    V of them (with two logarithms each: a tenth of a ModernBERT-mini ELECTRA step at V = 30,522).

    The cumulative sum runs in two levels, since a full [N, V] one is a slow sequential pass: over the sums of
    ``block`` consecutive columns to find the block the uniform falls in, then within that block only. The
    float32 sums move each column's share by about 1e-6 at most, far below what any step can see."""
    n, v = probs.shape
    full = v - v % block
    sums = probs[:, :full].reshape(n, -1, block).sum(-1)  # [N, V // block]
    if full < v:
        sums = torch.cat([sums, probs[:, full:].sum(-1, keepdim=True)], dim=1)
    outer = sums.cumsum(-1)  # [N, blocks]
    u = torch.rand(n, 1, device=probs.device, dtype=outer.dtype) * outer[:, -1:]
    b = torch.searchsorted(outer, u, right=True).clamp_(max=outer.shape[1] - 1)  # [N, 1]: the block
    u = u - torch.where(b > 0, outer.gather(1, (b - 1).clamp(min=0)), torch.zeros_like(u))  # into the block
    columns = b * block + torch.arange(block, device=probs.device)  # [N, block]
    inner = probs.gather(1, columns.clamp(max=v - 1)).masked_fill_(columns >= v, 0.0).cumsum(-1)
    j = torch.searchsorted(inner, u, right=True).clamp_(max=block - 1)
    return (b * block + j).squeeze(1).clamp_(max=v - 1)


@dataclass
class ElectraPretrainingOutput(_Output):
    loss: Tensor | None = None
    generator_loss: Tensor | None = None  # mean cross-entropy at the masked positions
    discriminator_loss: Tensor | None = None  # mean binary cross-entropy over the real tokens
    # [N, vocab] at the N masked positions (row-major order), in fp32 under bf16 autocast too: the metrics' argmax
    # over a vocabulary-wide row is several times slower in bf16, and the loss has the fp32 copy already
    generator_logits: Tensor | None = None
    generator_labels: Tensor | None = None  # [N] the original tokens there
    discriminator_logits: Tensor | None = None  # [B, T]
    replaced: Tensor | None = None  # bool [B, T]: the discriminator's targets (False on padding)
    real: Tensor | None = None  # bool [B, T]: real (non-padding) tokens


class ElectraJointLoss:
    """The ELECTRA step, whatever the architecture of its two networks: masking for the generator, sampling
    the replacements, and the joint loss. A subclass (an ``nn.Module``) sets ``mask_token_id``,
    ``mask_token_prob`` and ``discriminator_weight``, has the encoders ``generator`` and ``discriminator`` and
    the head ``discriminator_predictions``, and gives the generator's scores (:meth:`generator_scores`)."""

    mask_token_id: int
    mask_token_prob: float
    discriminator_weight: float

    def set_step(
        self, discriminator_weight: float = 50.0, mask_token_id: int = 103, mask_token_prob: float = 0.85
    ) -> None:
        """The step's settings: λ of the joint loss, the data's ``[MASK]`` id, and the share of the masked
        positions the generator sees as ``[MASK]`` (the rest keep their token)."""
        self.discriminator_weight = float(discriminator_weight)
        self.mask_token_id = int(mask_token_id)
        self.mask_token_prob = float(mask_token_prob)

    def generator_scores(self, hidden: Tensor) -> Tensor:
        """The generator's output layers: [N, generator hidden] -> [N, vocab]."""
        raise NotImplementedError

    def generator_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None, masked: Tensor
    ) -> Tensor:
        """The generator's scores at the masked positions: ids [B, T], ``masked`` bool [B, T] -> [N, vocab]
        (row-major order)."""
        hidden = self.generator(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return self.generator_scores(hidden.last_hidden_state[masked])

    def discriminator_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None
    ) -> Tensor:
        """The discriminator's "replaced?" logit of every token: [B, T] -> [B, T]."""
        hidden = self.discriminator(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return self.discriminator_predictions(hidden.last_hidden_state)

    def save_run(self, model_dir: str | Path) -> list[Path]:
        """A finished run's model: the discriminator as a plain encoder folder in ``model_dir`` (what
        ``finetune``, ``serve`` and ``embed`` take), the rest under ``model_dir/electra``; returns the folders
        that get the tokenizer."""
        raise NotImplementedError

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> ElectraPretrainingOutput:
        """One ELECTRA step's losses.

        input_ids, attention_mask, token_type_ids, labels: [B, T]; ``labels`` hold the original token at the
        masked positions and -100 elsewhere (the masked-LM data's convention). Random draws, in this order,
        from torch's generator: which masked positions show ``[MASK]`` to the generator (``mask_token_prob``;
        the others show the original token, as ELECTRA's own masking), then one uniform per masked position
        that samples its replacement (:func:`sample_rows`).
        """
        if labels is None:
            raise ValueError("ELECTRA needs labels (the original tokens at masked positions)")
        real = (
            torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        )
        masked = labels != IGNORE_INDEX
        original = torch.where(masked, labels, input_ids)

        show_mask = masked & (torch.rand(input_ids.shape, device=input_ids.device) < self.mask_token_prob)
        generator_input = torch.where(show_mask, torch.full_like(original, self.mask_token_id), original)
        logits = self.generator_logits(generator_input, attention_mask, token_type_ids, masked)  # [N, V]
        targets = original[masked]
        scores = logits.float()
        if targets.numel() and kernels.fast_ok(scores):  # the same, one vocabulary-wide pass fewer each way
            generator_loss, probs = kernels.cross_entropy_with_probs(scores, targets)
        else:
            log_probs = F.log_softmax(scores, dim=-1)  # [N, V]: the loss's, and the sampler's
            generator_loss = F.nll_loss(log_probs, targets) if targets.numel() else logits.sum() * 0.0
            probs = log_probs.detach().exp()

        with torch.no_grad():  # sampling is not differentiated (the paper trains the generator by MLM only)
            sampled = sample_rows(probs)
            corrupted = original.clone()
            corrupted[masked] = sampled
            replaced = (corrupted != original) & real

        disc_logits = self.discriminator_logits(corrupted, attention_mask, token_type_ids)  # [B, T]
        discriminator_loss = F.binary_cross_entropy_with_logits(
            disc_logits.float()[real], replaced[real].float()
        )
        return ElectraPretrainingOutput(
            loss=generator_loss + self.discriminator_weight * discriminator_loss,
            generator_loss=generator_loss,
            discriminator_loss=discriminator_loss,
            generator_logits=scores,
            generator_labels=targets,
            discriminator_logits=disc_logits,
            replaced=replaced,
            real=real,
        )


class ElectraPretrainingModel(ElectraJointLoss, BertPreTrainedModel):
    """Generator + discriminator, trained together. ``config`` is the discriminator's (a BERT config)."""

    _tied_weights = {"generator_lm_head.weight": "discriminator.embeddings.word_embeddings.weight"}

    def __init__(self, config: BertConfig, generator_fraction: float = 0.25, **step: Any) -> None:
        """``step``: :meth:`ElectraJointLoss.set_step`'s settings."""
        super().__init__(config)
        self.generator_fraction = float(generator_fraction)
        self.set_step(**step)
        self.generator_config = generator_config(config, generator_fraction)

        self.discriminator = BertModel(config)
        self.discriminator_predictions = DiscriminatorHead(config.hidden_size, config.hidden_act)
        self.generator = BertModel(self.generator_config, add_pooling_layer=False)
        self.generator.embeddings = ProjectedEmbeddings(
            self.discriminator.embeddings, self.generator_config.hidden_size
        )
        self.generator_predictions = GeneratorHead(self.generator_config, config.hidden_size)
        self.generator_lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def generator_scores(self, hidden: Tensor) -> Tensor:
        return self.generator_lm_head(self.generator_predictions(hidden))

    # ------------------------------------------------------------------ saving
    def save_run(self, model_dir: str | Path) -> list[Path]:
        self.save_pretrained_bert(model_dir)
        return [Path(model_dir), *self.save_pretrained_electra(Path(model_dir) / "electra")]

    def save_pretrained_bert(self, model_dir: str | Path) -> None:
        """The discriminator's encoder (with an untrained pooler, as any BERT fine-tunes it) in the Hugging
        Face BERT layout: ``BertModel.from_pretrained`` in bertkit or transformers loads it."""
        self.discriminator.save_pretrained(model_dir)

    def save_pretrained_electra(self, out_dir: str | Path) -> tuple[Path, Path]:
        """``OUT/discriminator`` (``ElectraForPreTraining``) and ``OUT/generator`` (``ElectraForMaskedLM``) in
        transformers' ELECTRA layout; returns the two folders."""
        out_dir = Path(out_dir)
        state = self.state_dict()
        # the encoders under "electra." (no pooler), the heads under their own names
        disc_head = ("discriminator_predictions.", "discriminator_predictions.")
        disc = renamed(state, [("discriminator.", "electra."), disc_head], skip=("discriminator.pooler.",))
        gen_heads = [(h, h) for h in ("generator_predictions.", "generator_lm_head.")]
        project = ("generator.embeddings.project.", "electra.embeddings_project.")
        gen = {
            **renamed(state, [("discriminator.embeddings.", "electra.embeddings.")]),  # the shared layer
            **renamed(state, [project, ("generator.", "electra."), *gen_heads]),
        }
        folders = []
        for name, tensors, cfg, arch in (
            ("discriminator", disc, self.config, "ElectraForPreTraining"),
            ("generator", gen, self.generator_config, "ElectraForMaskedLM"),
        ):
            with atomic_dir(out_dir / name) as tmp:
                atomic_write_json(
                    tmp / "config.json", electra_config_dict(cfg, self.config.hidden_size, arch)
                )
                save_state_dict(tensors, tmp / SAFETENSORS)
            folders.append(out_dir / name)
        return folders[0], folders[1]


def load_pretrained_electra(electra_dir: str | Path, **step: Any) -> ElectraPretrainingModel:
    """Both networks back from :meth:`ElectraPretrainingModel.save_pretrained_electra`'s folders (to continue
    pre-training): ``DIR/discriminator`` and ``DIR/generator``, as this module writes them; ``step``:
    :meth:`ElectraJointLoss.set_step`'s settings."""
    from bertkit.checkpoint import load_state_dict

    electra_dir = Path(electra_dir)
    configs = {}
    for name in ("discriminator", "generator"):
        path = electra_dir / name / "config.json"
        if not path.is_file():
            raise UserError(f"{path}: not found; continuing ELECTRA needs the run's model/electra/ folders")
        configs[name] = json.loads(path.read_text(encoding="utf-8"))
    d, g = configs["discriminator"], configs["generator"]
    # embedding_size is the discriminator's width here: bertkit's discriminators embed at their own width
    fields = {f.name for f in dataclasses.fields(BertConfig)} - {
        "extra",
        "model_type",
        "architectures",
        "embedding_size",
    }
    config = BertConfig(**{k: v for k, v in d.items() if k in fields})
    fraction = g["hidden_size"] / d["hidden_size"]
    model = ElectraPretrainingModel(config, fraction, **step)
    if model.generator_config.hidden_size != g["hidden_size"]:
        raise UserError(
            f"{electra_dir}: the generator's width {g['hidden_size']} is not one this module builds"
        )
    disc = load_state_dict(electra_dir / "discriminator")
    state = renamed(disc, [("electra.", "discriminator."), ("", "")])
    project = ("electra.embeddings_project.", "generator.embeddings.project.")
    generator = [project, ("electra.", "generator."), ("", "")]
    shared = ("electra.embeddings.",)  # left out: the discriminator's copy is the same weights
    state.update(renamed(load_state_dict(electra_dir / "generator"), generator, skip=shared))
    return copy_weights(model, state, electra_dir, optional=("discriminator.pooler.",))


def renamed(
    state: dict[str, Tensor], prefixes: list[tuple[str, str]], skip: tuple[str, ...] = ()
) -> dict[str, Tensor]:
    """The tensors of ``state`` whose names start with an old prefix of ``prefixes`` (``(old, new)`` pairs,
    the first that matches; ``""`` matches every name), renamed to start with its new one instead; names
    starting with one of ``skip`` are left out, as are those no old prefix matches."""
    out = {}
    for k, v in state.items():
        if k.startswith(skip):
            continue
        for old, new in prefixes:
            if k.startswith(old):
                out[new + k[len(old) :]] = v
                break
    return out


def copy_weights(model: M, state: dict[str, Tensor], source: str | Path, optional: tuple[str, ...] = ()) -> M:
    """``model`` with every tensor of its state dict copied from ``state`` (keys under the ``optional``
    prefixes may be absent; tied copies are re-tied); UserError naming ``source`` when any other is missing."""
    own = model.state_dict()
    tied = model._tied_targets()
    missing = sorted(k for k in own if k not in state and k not in tied and not k.startswith(optional))
    if missing:
        raise UserError(f"{source}: weights missing from the ELECTRA folders: {', '.join(missing[:5])}")
    with torch.no_grad():
        for k, v in state.items():
            if k in own:
                own[k].copy_(v.to(own[k].dtype))
    model.tie_weights()
    return model


def electra_config_dict(config: BertConfig, embedding_size: int, architecture: str) -> dict:
    """transformers' ``ElectraConfig`` fields for a network of ``config``'s shape over embeddings of
    ``embedding_size``."""
    return {
        "architectures": [architecture],
        "model_type": "electra",
        "vocab_size": config.vocab_size,
        "embedding_size": embedding_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }


__all__ = [
    "DiscriminatorHead",
    "ElectraJointLoss",
    "sample_rows",
    "ElectraPretrainingModel",
    "ElectraPretrainingOutput",
    "GeneratorHead",
    "ProjectedEmbeddings",
    "copy_weights",
    "electra_config_dict",
    "generator_config",
    "load_pretrained_electra",
    "renamed",
    "scaled_widths",
]
