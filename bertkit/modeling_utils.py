"""BertPreTrainedModel: initialisation, weight tying, and loading/saving in the Hugging Face layout.

Every bertkit model (the encoder and each head class) derives from it. Head classes keep the
encoder as ``self.bert`` and name their layers as transformers does, so one loading routine maps
any BERT checkpoint onto any of them: keys gain or lose the ``bert.`` prefix as needed. Another
architecture (:mod:`bertkit.modernbert`) reuses it by naming its own ``config_class`` and
``base_model_prefix``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from .bert_family import FAMILY, member_of, to_bertkit_key, to_family_key
from .checkpoint import SAFETENSORS, load_state_dict, save_state_dict
from .config import BertConfig, HFConfig
from .errors import UserError
from .io import atomic_dir

logger = logging.getLogger("bertkit")

M = TypeVar("M", bound="BertPreTrainedModel")


@dataclass
class LoadingInfo:
    """What a checkpoint load did not match: keys the model lacks values for, keys it did not use,
    and tensors skipped for a shape difference (only with ``ignore_mismatched_sizes``)."""

    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)
    mismatched_keys: list[str] = field(default_factory=list)


def _absent_as_zero(model_type: str) -> tuple[str, ...]:
    """Name endings of bertkit tensors the family member lacks and computes as zero (bert_family.py)."""
    return member_of(model_type).absent_as_zero


class BertPreTrainedModel(nn.Module):
    """Base class: ``config``, HF-style init, tying, ``from_pretrained`` / ``save_pretrained``."""

    config_class: ClassVar[type[HFConfig]] = BertConfig
    base_model_prefix: ClassVar[str] = "bert"
    # target parameter name -> source parameter name; the target is made the same Parameter.
    _tied_weights: ClassVar[dict[str, str]] = {}
    # regexes of checkpoint keys that are known aliases or leftovers and are dropped quietly.
    _ignored_keys: ClassVar[tuple[str, ...]] = (r"(^|\.)position_ids$",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"config must be a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config

    # ------------------------------------------------------------ init & tying
    def _init_weights(self, module: nn.Module) -> None:
        """Truncated normal (±2 std) of std ``initializer_range`` as the original release; zero biases;
        LayerNorm weight 1, bias 0."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def post_init(self) -> None:
        """Initialise every weight, then tie. Subclasses call this at the end of ``__init__``."""
        with torch.no_grad():
            self.apply(self._init_weights)
            self._init_extra()
        self.tie_weights()

    def _init_extra(self) -> None:
        """Hook for parameters that are not inside a Linear/Embedding/LayerNorm (e.g. a bias vector)."""

    def tie_weights(self) -> None:
        for target, source in self._tied_weights.items():
            owner_name, _, attr = target.rpartition(".")
            owner = self.get_submodule(owner_name)
            setattr(owner, attr, self.get_parameter(source))

    def _tied_targets(self) -> set[str]:
        return set(self._tied_weights)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    # ----------------------------------------------------------------- loading
    def _map_checkpoint_key(self, key: str, expected: set[str]) -> str | None:
        """The model key a checkpoint key belongs to, or None if it has no place in this model."""
        prefix = self.base_model_prefix + "."
        if self.config.model_type in FAMILY:  # RoBERTa's, ELECTRA's, ... names (bert_family.py)
            key = to_bertkit_key(key, self.config.model_type)
        if key in expected:
            return key
        if prefix + key in expected:  # encoder-only checkpoint into a head model
            return prefix + key
        if key.startswith(prefix) and key[len(prefix) :] in expected:  # head checkpoint into BertModel
            return key[len(prefix) :]
        return None

    def load_checkpoint_state(
        self,
        state: dict[str, torch.Tensor],
        ignore_mismatched_sizes: bool = False,
        source: str = "checkpoint",
    ) -> LoadingInfo:
        """Copy matching tensors of ``state`` into this model; returns what did not match.

        A tensor whose shape differs raises UserError naming it and both shapes, unless
        ``ignore_mismatched_sizes`` (then it keeps its fresh initialisation, e.g. a new classifier).
        """
        own = self.state_dict()
        expected = set(own)
        tied = self._tied_targets()
        ignored = [re.compile(p) for p in self._ignored_keys]
        info = LoadingInfo()
        to_load: dict[str, torch.Tensor] = {}
        for key, tensor in state.items():
            target = self._map_checkpoint_key(key, expected)
            if target is None:
                if not any(p.search(key) for p in ignored):
                    info.unexpected_keys.append(key)
                continue
            if target in tied:
                continue  # the source of the tie is loaded instead
            if tuple(tensor.shape) != tuple(own[target].shape):
                if ignore_mismatched_sizes:
                    info.mismatched_keys.append(
                        f"{target}: checkpoint {tuple(tensor.shape)} vs model {tuple(own[target].shape)}"
                    )
                    continue
                raise UserError(
                    f"{source}: tensor {key!r} has shape {tuple(tensor.shape)} in the checkpoint but "
                    f"{tuple(own[target].shape)} in the model; fix config.json, or pass "
                    "ignore_mismatched_sizes=True to re-initialise it"
                )
            to_load[target] = tensor
        zero = {
            k for k in expected - set(to_load) if k.endswith(_absent_as_zero(self.config.model_type))
        }  # tensors the checkpoint's family lacks and computes as zero (DistilBERT's segment embeddings)
        for name in zero:
            to_load[name] = torch.zeros_like(own[name])
        info.missing_keys = sorted(expected - set(to_load) - tied)
        with torch.no_grad():
            for name, tensor in to_load.items():
                own[name].copy_(tensor.to(own[name].dtype))
        self.tie_weights()
        return info

    @classmethod
    def from_pretrained(
        cls: type[M],
        model_dir: str | os.PathLike,
        config: BertConfig | None = None,
        output_loading_info: bool = False,
        ignore_mismatched_sizes: bool = False,
        allow_no_weights: bool = False,
        **config_overrides: Any,
    ) -> M | tuple[M, LoadingInfo]:
        """Load a model from a Hugging Face-layout directory.

        ``config_overrides`` change config fields before the model is built (``num_labels=3``,
        ``hidden_dropout_prob=0.0``, ...). Missing and unexpected keys are logged as warnings. Weights that
        hold none of the model's tensors are refused (the model would be all random) unless
        ``allow_no_weights``.
        """
        model_dir = Path(model_dir)
        if config is None:
            config = cls.config_class.from_pretrained(model_dir)
        for name, value in config_overrides.items():
            if not hasattr(config, name):
                raise TypeError(f"{cls.__name__}.from_pretrained got an unknown setting {name!r}")
            setattr(config, name, value)
        config.validate()
        model = cls(config)
        state = load_state_dict(model_dir)
        info = model.load_checkpoint_state(state, ignore_mismatched_sizes, source=str(model_dir))
        loaded = set(model.state_dict()) - model._tied_targets() - set(info.missing_keys)
        if not loaded and not allow_no_weights:
            seen = ", ".join(sorted(state)[:3]) or "no tensors at all"
            raise UserError(
                f"{model_dir}: the weights hold none of {cls.__name__}'s tensors (they hold {seen}); "
                "this is not a checkpoint of this model"
            )
        if info.missing_keys:
            logger.warning(
                "%s: weights not in the checkpoint, freshly initialised: %s",
                cls.__name__,
                ", ".join(info.missing_keys),
            )
        if info.unexpected_keys:
            logger.info("%s: checkpoint weights not used: %s", cls.__name__, ", ".join(info.unexpected_keys))
        if info.mismatched_keys:
            logger.warning(
                "%s: re-initialised for a shape difference: %s", cls.__name__, "; ".join(info.mismatched_keys)
            )
        model.eval()  # as transformers: inference mode until the caller calls .train()
        return (model, info) if output_loading_info else model

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, model_dir: str | os.PathLike) -> None:
        """Write ``config.json`` and ``model.safetensors`` (tied copies left out, as transformers does)."""
        tied = self._tied_targets()
        state = {k: v for k, v in self.state_dict().items() if k not in tied}
        if self.config.model_type in FAMILY:  # saved as it came: transformers loads it back
            absent = _absent_as_zero(self.config.model_type)
            state = {
                to_family_key(k, self.config.model_type): v
                for k, v in state.items()
                if not k.endswith(absent)
            }
        # a model that saves another class's layout (plus tensors that class ignores) names that class
        architecture = getattr(self, "saved_architecture", type(self).__name__)
        if architecture.startswith("Bert"):  # transformers' name for the member's class
            architecture = member_of(self.config.model_type).class_prefix + architecture[len("Bert") :]
        self.config.architectures = [architecture]
        with atomic_dir(model_dir) as tmp:
            self.config.save_pretrained(tmp)
            save_state_dict(state, tmp / SAFETENSORS)
