"""Task heads on the BERT encoder, named and called as transformers' classes of the same names."""

from bertkit.heads.finetune import *  # noqa: F403
from bertkit.heads.finetune import __all__ as _finetune_all
from bertkit.heads.pretraining import *  # noqa: F403
from bertkit.heads.pretraining import __all__ as _pretraining_all

__all__ = [*_pretraining_all, *_finetune_all]
