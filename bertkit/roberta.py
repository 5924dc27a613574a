"""RoBERTa checkpoints (Liu et al., 2019) as BERT: the same encoder, read from transformers' RoBERTa layout.

RoBERTa changed BERT's training, not its network. A Hugging Face RoBERTa folder (``model_type`` "roberta")
differs from a BERT one in three places only, and this module holds each:

- its positions start after the padding id: the i-th real token sits at ``pad_token_id + 1 + i`` and padding
  at ``pad_token_id`` (so ``max_position_embeddings`` 514 holds 512 tokens);
- its tensors are named ``roberta.*`` and its masked-LM head ``lm_head.*``;
- it has one segment type (``type_vocab_size`` 1): no segment ids.

Task heads are bertkit's BERT heads on the RoBERTa encoder; a RoBERTa classifier already fine-tuned by
transformers (``classifier.dense`` / ``classifier.out_proj``, no pooler) is not one of them.
"""

from __future__ import annotations

import torch
from torch import Tensor

ROBERTA = "roberta"

# checkpoint name prefix in transformers' RoBERTa layout -> bertkit's (BERT's) name prefix
_KEY_PREFIXES = (
    ("roberta.", "bert."),
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("lm_head.bias", "cls.predictions.bias"),
)


def position_ids_from_input_ids(input_ids: Tensor, padding_idx: int) -> Tensor:
    """input_ids [B, T] -> position ids [B, T]: ``padding_idx + 1 + i`` for the i-th non-padding token of a
    row, ``padding_idx`` for padding (RoBERTa's numbering, as transformers' ``RobertaEmbeddings``)."""
    real = input_ids.ne(padding_idx).to(torch.long)
    return torch.cumsum(real, dim=1) * real + padding_idx


def to_bertkit_key(key: str) -> str:
    """A tensor name of transformers' RoBERTa layout -> bertkit's (BERT's); other names unchanged."""
    for theirs, ours in _KEY_PREFIXES:
        if key.startswith(theirs):
            return ours + key[len(theirs) :]
    return key


def to_roberta_key(key: str) -> str:
    """bertkit's tensor name -> transformers' RoBERTa layout (the inverse of :func:`to_bertkit_key`)."""
    for theirs, ours in _KEY_PREFIXES:
        if key.startswith(ours):
            return theirs + key[len(ours) :]
    return key
