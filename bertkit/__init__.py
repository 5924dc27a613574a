"""bertkit: a complete BERT system on PyTorch.

Public names are imported lazily so ``import bertkit`` (and ``bertkit --help``) stays fast. Importing
bertkit leaves the process environment as it was: the entry points that want process-wide thread settings
(the ``bertkit`` command, ``make bench``) ask for them (:func:`bertkit.tuning.apply_process_defaults`).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BertConfig": "bertkit.config",
    "BertModel": "bertkit.model",
    "BertModelOutput": "bertkit.model",
    "BertPreTrainedModel": "bertkit.modeling_utils",
    "Tokenizer": "bertkit.tokenizer",
    "UserError": "bertkit.errors",
    "BertForPreTraining": "bertkit.heads.pretraining",
    "BertForMaskedLM": "bertkit.heads.pretraining",
    "BertForSequenceClassification": "bertkit.heads.finetune",
    "BertForTokenClassification": "bertkit.heads.finetune",
    "BertForQuestionAnswering": "bertkit.heads.finetune",
    "BertForMultipleChoice": "bertkit.heads.finetune",
    "SentenceEncoder": "bertkit.sentence.encoder",
    "CrossEncoder": "bertkit.sentence.cross_encoder",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
