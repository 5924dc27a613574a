"""Which architecture a Hugging Face-layout folder holds, read from its ``config.json``'s ``model_type``, and
that architecture's config and encoder classes: ModernBERT for ``"modernbert"``, BERT for anything else (BERT
checkpoints older than the key, and the BERT-shaped ones other names describe, load as they always did)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .bert_family import FAMILY, member_of
from .config import HFConfig, read_config_json

MODERNBERT = "modernbert"


def model_type_of(model_dir: str | os.PathLike) -> str:
    """``model_type`` of ``model_dir/config.json`` ("bert" when the key is absent); UserError naming the file
    when it is missing or not a JSON object."""
    data = read_config_json(Path(model_dir) / "config.json")
    value = data.get("model_type", "bert")
    return value if isinstance(value, str) else "bert"


def is_modernbert(model_dir: str | os.PathLike) -> bool:
    return model_type_of(model_dir) == MODERNBERT


def display_name(model_dir: str | os.PathLike) -> str:
    """The architecture's name as people write it, for model cards: "ModernBERT", "RoBERTa", ..., else
    "BERT"."""
    model_type = model_type_of(model_dir)
    if model_type == MODERNBERT:
        return "ModernBERT"
    return member_of(model_type).display


def load_config(model_dir: str | os.PathLike) -> HFConfig:
    """The folder's config as its architecture's config class (BertConfig or ModernBertConfig)."""
    if is_modernbert(model_dir):
        from .modernbert_config import ModernBertConfig

        return ModernBertConfig.from_pretrained(model_dir)
    from .config import BertConfig

    return BertConfig.from_pretrained(model_dir)


def load_encoder(model_dir: str | os.PathLike, **kwargs: Any) -> Any:
    """The folder's encoder without a task head (BertModel or ModernBertModel), in eval mode; ``kwargs`` go to
    ``from_pretrained``."""
    if is_modernbert(model_dir):
        from .modernbert import ModernBertModel

        return ModernBertModel.from_pretrained(model_dir, **kwargs)
    from .model import BertModel

    return BertModel.from_pretrained(model_dir, **kwargs)


def encoder_prefixes(model_dir: str | os.PathLike) -> tuple[str, ...]:
    """Checkpoint key prefixes of the encoder itself (what is not a head) for the folder's architecture."""
    if is_modernbert(model_dir):
        return ("model.", "embeddings.", "layers.", "final_norm.")
    return ("bert.", "embeddings.", "encoder.", "pooler.")


# task kind -> the head's class name after the architecture's prefix ("Bert" or "ModernBert")
HEADS = {
    "seq": "ForSequenceClassification",
    "token": "ForTokenClassification",
    "choice": "ForMultipleChoice",
    "qa": "ForQuestionAnswering",
    "mlm": "ForMaskedLM",
}


def head_class(kind: str, model_dir: str | os.PathLike | None = None) -> Any:
    """The task head ``kind`` (a key of :data:`HEADS`) of the folder's architecture; BERT's without a folder."""
    return class_of(HEADS[kind], model_dir is not None and is_modernbert(model_dir))


def class_of(head: str, modernbert: bool) -> Any:
    """The class of ``head`` ("Model" or a value of :data:`HEADS`) in ModernBERT's or BERT's architecture."""
    if modernbert:
        from . import modernbert as module
    elif head == "Model":
        from . import model as module
    else:
        from . import heads as module
    return getattr(module, ("ModernBert" if modernbert else "Bert") + head)


def pretraining_class(modernbert: bool) -> Any:
    """The model pre-training trains and saves: BERT's with both heads (``BertForPreTraining``), ModernBERT's
    masked LM (``ModernBertForMaskedLM``); a random-init baseline is one of these at its initialisation."""
    return class_of("ForMaskedLM", True) if modernbert else class_of("ForPreTraining", False)


def encoder_of(model: Any) -> Any:
    """The encoder inside a head model (BERT's ``bert``, ModernBERT's ``model``), or the encoder itself."""
    from .model import BertModel
    from .modernbert import ModernBertModel

    if isinstance(model, (BertModel, ModernBertModel)):
        return model
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, ModernBertModel) else model.bert


# class-name prefixes of the architectures bertkit runs (BERT's family: bertkit/bert_family.py), longest first
# so that "XLMRoberta" is tried before "Roberta"
CLASS_PREFIXES = tuple(
    sorted({"ModernBert", "Bert", *(m.class_prefix for m in FAMILY.values())}, key=len, reverse=True)
)


def head_of(architecture: str) -> str:
    """``architecture`` (a config's ``architectures[0]``) without its architecture's prefix:
    "ModernBertForMaskedLM" -> "ForMaskedLM", "RobertaForSequenceClassification" ->
    "ForSequenceClassification", "BertModel" -> "Model"."""
    for prefix in CLASS_PREFIXES:
        if architecture.startswith(prefix):
            return architecture[len(prefix) :]
    return architecture


def model_class(architecture: str | None, model_dir: str | os.PathLike | None = None) -> Any:
    """The bertkit class a config's ``architectures[0]`` names, in the folder's architecture (BERT's without
    a folder): a task head of :data:`HEADS` or the pre-training model, else the bare encoder. A BERT-family
    member's head ("RobertaForSequenceClassification") runs as BERT's (bertkit/bert_family.py)."""
    modernbert = model_dir is not None and is_modernbert(model_dir)
    head = head_of(architecture or "")
    known = head in HEADS.values() or head == "ForPreTraining"
    return class_of(head if known else "Model", modernbert)
