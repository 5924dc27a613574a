"""RoBERTa's recipe (Liu et al., 2019) as an objective: masked LM without NSP on FULL-SENTENCES inputs -
whole sentences packed up to the window across document boundaries, a ``[SEP]`` between documents - with the
mask drawn anew every time an instance is read (bertkit's dynamic stream always does that)."""

from __future__ import annotations

from bertkit.objective_names import OBJECTIVES
from bertkit.objectives.bert import MaskedLM


class RobertaRecipe(MaskedLM):
    name = "roberta"
    summary = OBJECTIVES[name]
    pack_documents = True
    setting_defaults = {"masked_lm_prob": 0.15}
