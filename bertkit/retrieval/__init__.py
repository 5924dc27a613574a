"""Evaluating sentence models (:mod:`bertkit.sentence`) on similarity and retrieval.

- :mod:`.sts`          STS-B evaluation (Spearman/Pearson from :mod:`bertkit.tasks.metrics`), pair
                        retrieval (``python -m bertkit.retrieval``)
- :mod:`.metrics`      recall@k, MRR@10, nDCG@10 of ranked lists
- :mod:`.evaluate`     retrieval evaluation (bi-encoder, optionally re-ranked by a cross-encoder)
"""

from ..tasks.metrics import pearson, rankdata, spearman
from .sts import evaluate_pair_retrieval, evaluate_sts, main, read_sts

__all__ = ["evaluate_pair_retrieval", "evaluate_sts", "main", "pearson", "rankdata", "read_sts", "spearman"]
