"""Checkpoints of BERT's family in transformers' layouts, read as BERT: RoBERTa (Liu et al., 2019), its
multilingual XLM-RoBERTa (Conneau et al., 2020) and ELECTRA (Clark et al., 2020) changed how BERT is trained,
not its network.

A Hugging Face folder whose ``model_type`` is one of these differs from a BERT folder in the names of its
tensors (:data:`FAMILY_NAMES`) and in little else, each held here or in the config:

- RoBERTa (and XLM-RoBERTa) numbers positions after the padding id: the i-th real token sits at ``pad_token_id + 1 + i`` and
  padding at ``pad_token_id`` (so ``max_position_embeddings`` 514 holds 512 tokens;
  :attr:`bertkit.config.BertConfig.position_offset`), and it has one segment type (``type_vocab_size`` 1);
- ELECTRA's small models embed narrower than they compute (``embedding_size``; the encoder maps the
  embeddings up, ``embeddings_project``), and its encoder has no pooler.

bertkit's BERT heads go on these encoders; a model loaded from such a folder saves back under the family's
names, so transformers reads it. Classifiers transformers already fine-tuned (RoBERTa's and ELECTRA's
``classifier.dense`` / ``classifier.out_proj``, without a pooler) are not among bertkit's heads.
"""

from __future__ import annotations

import torch
from torch import Tensor

ROBERTA = "roberta"
XLM_ROBERTA = "xlm-roberta"  # RoBERTa trained on 100 languages (XLM-R; multilingual-e5, bge-m3 build on it)
ELECTRA = "electra"
# the members that number positions after the padding id
OFFSET_POSITIONS = (ROBERTA, XLM_ROBERTA)

# model_type -> (the family's checkpoint name prefix, bertkit's (BERT's) name prefix)
FAMILY_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    ROBERTA: (
        ("roberta.", "bert."),
        ("lm_head.dense.", "cls.predictions.transform.dense."),
        ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
        ("lm_head.decoder.", "cls.predictions.decoder."),
        ("lm_head.bias", "cls.predictions.bias"),
    ),
    ELECTRA: (  # ElectraModel, ElectraForPreTraining (the discriminator), ElectraForMaskedLM (the generator)
        ("electra.", "bert."),
        ("generator_predictions.dense.", "cls.predictions.transform.dense."),
        ("generator_predictions.LayerNorm.", "cls.predictions.transform.LayerNorm."),
        ("generator_lm_head.weight", "cls.predictions.decoder.weight"),
        ("generator_lm_head.bias", "cls.predictions.bias"),
    ),
}


FAMILY_NAMES[XLM_ROBERTA] = FAMILY_NAMES[ROBERTA]  # the same network and names, a multilingual vocabulary


def position_ids_from_input_ids(input_ids: Tensor, padding_idx: int) -> Tensor:
    """input_ids [B, T] -> position ids [B, T]: ``padding_idx + 1 + i`` for the i-th non-padding token of a
    row, ``padding_idx`` for padding (RoBERTa's numbering, as transformers' ``RobertaEmbeddings``)."""
    real = input_ids.ne(padding_idx).to(torch.long)
    return torch.cumsum(real, dim=1) * real + padding_idx


def to_bertkit_key(key: str, model_type: str) -> str:
    """A tensor name of the family member's layout -> bertkit's (BERT's); other names unchanged."""
    for theirs, ours in FAMILY_NAMES.get(model_type, ()):
        if key.startswith(theirs):
            return ours + key[len(theirs) :]
    return key


def to_family_key(key: str, model_type: str) -> str:
    """bertkit's tensor name -> the family member's layout (the inverse of :func:`to_bertkit_key`)."""
    for theirs, ours in FAMILY_NAMES.get(model_type, ()):
        if key.startswith(ours):
            return theirs + key[len(ours) :]
    return key
