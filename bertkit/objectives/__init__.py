"""Pre-training objectives: one :class:`Objective` per way of pre-training, found by name in :data:`REGISTRY`.

``bertkit pretrain --objective NAME`` offers the names of :mod:`bertkit.objective_names` (the same, in the same
order: a test checks it), so that the parser needs no torch; :mod:`bertkit.pretrain` asks the objective
for the data stream, the model, the loss and what to save (see :mod:`bertkit.objectives.base`).
"""

from __future__ import annotations

from typing import Any

from bertkit.errors import UserError
from bertkit.objectives.base import Metrics, Objective
from bertkit.objectives.bert import LeftToRight, MaskedLM, MaskedLMNextSentence
from bertkit.objectives.electra import Electra
from bertkit.objectives.roberta import RobertaRecipe

REGISTRY: dict[str, type[Objective]] = {
    cls.name: cls for cls in (MaskedLMNextSentence, MaskedLM, LeftToRight, RobertaRecipe, Electra)
}


def objective_class(name: str) -> type[Objective]:
    """The registered objective called ``name`` (a UserError listing the choices otherwise)."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise UserError(f"objective must be one of {', '.join(REGISTRY)}, not {name!r}") from None


def get_objective(
    name: str, options: dict[str, Any] | None = None, pad_token_id: int = 0, mask_token_id: int = 103
) -> Objective:
    """An instance of the objective ``name`` with its ``options`` checked."""
    return objective_class(name)(options, pad_token_id=pad_token_id, mask_token_id=mask_token_id)


__all__ = ["REGISTRY", "Metrics", "Objective", "get_objective", "objective_class"]
