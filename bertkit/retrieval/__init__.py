"""Evaluating sentence models (:mod:`bertkit.sentence`) on similarity and retrieval.

- :mod:`.sts`          STS-B reading, Spearman/Pearson, pair retrieval (``python -m bertkit.retrieval``)
- :mod:`.metrics`      recall@k, MRR@10, nDCG@10 of ranked lists
- :mod:`.evaluate`     retrieval evaluation (bi-encoder, optionally re-ranked by a cross-encoder)
"""

from .sts import evaluate_pair_retrieval, evaluate_sts, main, pearson, rankdata, read_sts, spearman

__all__ = ["evaluate_pair_retrieval", "evaluate_sts", "main", "pearson", "rankdata", "read_sts", "spearman"]
