"""bertkit: a complete BERT system on PyTorch.

Public names are imported lazily so ``import bertkit`` (and ``bertkit --help``) stays fast. Importing
bertkit leaves the process environment as it was: the entry points that want process-wide thread settings
(the ``bertkit`` command, ``make bench``) ask for them (:func:`bertkit.tuning.apply_process_defaults`).
"""

from __future__ import annotations

from bertkit.lazy import lazy_getattr

__version__ = "0.1.0"

# public name -> the module of bertkit that defines it
_EXPORTS: dict[str, str] = {
    "BertConfig": "config",
    "BertModel": "model",
    "BertModelOutput": "model",
    "BertPreTrainedModel": "modeling_utils",
    "Tokenizer": "tokenizer",
    "UserError": "errors",
    "BertForPreTraining": "heads.pretraining",
    "BertForMaskedLM": "heads.pretraining",
    "BertForSequenceClassification": "heads.finetune",
    "BertForTokenClassification": "heads.finetune",
    "BertForQuestionAnswering": "heads.finetune",
    "BertForMultipleChoice": "heads.finetune",
    "SentenceEncoder": "sentence.encoder",
    "CrossEncoder": "sentence.cross_encoder",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
