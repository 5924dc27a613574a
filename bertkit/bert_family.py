"""Checkpoints of BERT's family in transformers' layouts, read as BERT: RoBERTa (Liu et al., 2019) with its
multilingual XLM-RoBERTa (Conneau et al., 2020) and French CamemBERT, ELECTRA (Clark et al., 2020) and
DistilBERT (Sanh et al., 2019) changed how BERT is trained, not its network.

A Hugging Face folder whose ``model_type`` is one of these differs from a BERT folder in the names of its
tensors and in little else, each held here (:data:`FAMILY`, one :class:`Member` per ``model_type``) or in the
config:

- RoBERTa, XLM-RoBERTa and CamemBERT number positions after the padding id: the i-th real token sits at
  ``pad_token_id + 1 + i`` and padding at ``pad_token_id`` (so ``max_position_embeddings`` 514 holds 512
  tokens; :attr:`bertkit.config.BertConfig.position_offset`), and have one segment type (``type_vocab_size`` 1);
- ELECTRA's small models embed narrower than they compute (``embedding_size``; the encoder maps the
  embeddings up, ``embeddings_project``), and its encoder has no pooler;
- DistilBERT names BERT's sizes (``dim``, ``n_layers``, ...: :attr:`Member.config_keys`) and layers its own
  way, and has neither segment embeddings (bertkit's are zero) nor a pooler.

bertkit's BERT heads go on these encoders, except the sequence head, which is each member's own
(:attr:`Member.classifier`: ``classifier.dense`` / ``classifier.out_proj``; DistilBERT's ``pre_classifier``,
:attr:`Member.pre_classifier`), so classifiers transformers fine-tuned load whole. A model loaded from such a
folder saves back under the member's names and class names, so transformers reads it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class Names:
    """How a family member names BERT's tensors: its encoder's prefix in head models (bertkit's is "bert."),
    and renamed parts of names, theirs -> ours, where ``{n}`` stands for a layer number."""

    prefix: str
    parts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Member:
    """One member of BERT's family as transformers stores it."""

    display: str  # as people write it, for model cards
    class_prefix: str  # transformers' class names: class_prefix + "ForSequenceClassification"
    names: Names
    offset_positions: bool = False  # positions numbered after the padding id (RoBERTa's)
    # the sequence head: BERT's "pooler" (pooled [CLS] -> linear), a module head with this activation ("tanh",
    # "gelu": classifier.dense / classifier.out_proj), or a "linear" layer on the [CLS] vector
    classifier: str = "pooler"
    pre_classifier: bool = False  # a dense + ReLU layer before that linear one (DistilBERT's pre_classifier)
    absent_as_zero: tuple[str, ...] = ()  # bertkit tensors it does not have, which must then be zero
    # its config.json's names for BertConfig's fields (read, and written beside ours for transformers)
    config_keys: tuple[tuple[str, str], ...] = ()
    # BertConfig fields its config.json leaves out, at the values its network has
    config_defaults: tuple[tuple[str, Any], ...] = ()


_ROBERTA_NAMES = Names("roberta.", (
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("lm_head.bias", "cls.predictions.bias"),
))  # fmt: skip
_LAYER = "transformer.layer.{n}."

# model_type -> the member; "bert" and folders without a model_type are BERT itself
FAMILY: dict[str, Member] = {
    "roberta": Member("RoBERTa", "Roberta", _ROBERTA_NAMES, offset_positions=True, classifier="tanh"),
    # RoBERTa trained on 100 languages (XLM-R; multilingual-e5 and bge-m3 build on it), and on French
    "xlm-roberta": Member("XLM-RoBERTa", "XLMRoberta", _ROBERTA_NAMES, offset_positions=True, classifier="tanh"),
    "camembert": Member("CamemBERT", "Camembert", _ROBERTA_NAMES, offset_positions=True, classifier="tanh"),
    "electra": Member("ELECTRA", "Electra", Names("electra.", (  # ElectraModel, ...ForPreTraining, ...ForMaskedLM
        ("generator_predictions.dense.", "cls.predictions.transform.dense."),
        ("generator_predictions.LayerNorm.", "cls.predictions.transform.LayerNorm."),
        ("generator_lm_head.weight", "cls.predictions.decoder.weight"),
        ("generator_lm_head.bias", "cls.predictions.bias"),
    )), classifier="gelu"),
    "distilbert": Member("DistilBERT", "DistilBert", Names("distilbert.", (  # BERT's layers, other names
        (_LAYER + "attention.q_lin.", "encoder.layer.{n}.attention.self.query."),
        (_LAYER + "attention.k_lin.", "encoder.layer.{n}.attention.self.key."),
        (_LAYER + "attention.v_lin.", "encoder.layer.{n}.attention.self.value."),
        (_LAYER + "attention.out_lin.", "encoder.layer.{n}.attention.output.dense."),
        (_LAYER + "sa_layer_norm.", "encoder.layer.{n}.attention.output.LayerNorm."),
        (_LAYER + "ffn.lin1.", "encoder.layer.{n}.intermediate.dense."),
        (_LAYER + "ffn.lin2.", "encoder.layer.{n}.output.dense."),
        (_LAYER + "output_layer_norm.", "encoder.layer.{n}.output.LayerNorm."),
        ("vocab_transform.", "cls.predictions.transform.dense."),
        ("vocab_layer_norm.", "cls.predictions.transform.LayerNorm."),
        ("vocab_projector.weight", "cls.predictions.decoder.weight"),
        ("vocab_projector.bias", "cls.predictions.bias"),
    )), classifier="linear", pre_classifier=True, absent_as_zero=("embeddings.token_type_embeddings.weight",),  # no segments
        config_keys=(  # transformers' DistilBertConfig reads only these
            ("dim", "hidden_size"), ("n_layers", "num_hidden_layers"), ("n_heads", "num_attention_heads"),
            ("hidden_dim", "intermediate_size"), ("activation", "hidden_act"),
            ("dropout", "hidden_dropout_prob"), ("attention_dropout", "attention_probs_dropout_prob"),
        ),
        config_defaults=(("type_vocab_size", 1), ("layer_norm_eps", 1e-12)),
    ),
}  # fmt: skip
# the model types bertkit runs as BERT: BERT itself and its family
BERT_TYPES = ("bert", *FAMILY)
# BERT itself, as a member: what a folder of model_type "bert", or none, or one outside the family reads as
BERT = Member("BERT", "Bert", Names("bert."))


def member_of(model_type: str | None) -> Member:
    """The family member a config's ``model_type`` names; BERT itself for "bert", for none, and for a type
    outside the family (e.g. "modernbert", whose own classes never ask)."""
    return FAMILY.get(model_type, BERT) if isinstance(model_type, str) else BERT


_BERT = "bert."


@functools.cache
def _pattern(part: str) -> re.Pattern[str]:
    return re.compile(re.escape(part).replace(re.escape("{n}"), r"(?P<n>\d+)"))


def _rename(inner: str, pairs: tuple[tuple[str, str], ...]) -> str:
    """``inner`` with the first of ``pairs`` (source part, target part) that starts it renamed."""
    for source, target in pairs:
        m = _pattern(source).match(inner)
        if m:
            return target.replace("{n}", m.groupdict().get("n") or "") + inner[m.end() :]
    return inner


def to_bertkit_key(key: str, model_type: str) -> str:
    """A tensor name of the family member's layout -> bertkit's (BERT's); other names unchanged."""
    if model_type not in FAMILY:
        return key
    names = FAMILY[model_type].names
    if key.startswith(names.prefix):  # a head model's encoder
        return _BERT + _rename(key[len(names.prefix) :], names.parts)
    return _rename(key, names.parts)  # a bare encoder's names, or a head's


def to_family_key(key: str, model_type: str) -> str:
    """bertkit's tensor name -> the family member's layout (the inverse of :func:`to_bertkit_key`)."""
    if model_type not in FAMILY:
        return key
    names = FAMILY[model_type].names
    back = tuple((ours, theirs) for theirs, ours in names.parts)
    if key.startswith(_BERT):
        return names.prefix + _rename(key[len(_BERT) :], back)
    return _rename(key, back)


def position_ids_from_input_ids(input_ids: Tensor, padding_idx: int) -> Tensor:
    """input_ids [B, T] -> position ids [B, T]: ``padding_idx + 1 + i`` for the i-th non-padding token of a
    row, ``padding_idx`` for padding (RoBERTa's numbering, as transformers' ``RobertaEmbeddings``)."""
    real = input_ids.ne(padding_idx).to(torch.long)
    return torch.cumsum(real, dim=1) * real + padding_idx
