"""Sentence similarity, retrieval and re-ranking: train them (bi-encoders, cross-encoders), evaluate them.

- :mod:`.sts`          STS-B reading, Spearman/Pearson, pair retrieval (``python -m bertkit.retrieval``)
- :mod:`.metrics`      recall@k, MRR@10, nDCG@10 of ranked lists
- :mod:`.data`         training/evaluation files (JSONL) and the SQuAD article split
- :mod:`.losses`       MultipleNegativesRanking (symmetric option), CosineSimilarity, CoSENT
- :mod:`.bi_encoder`   BERT + pooling (+ Dense) (+ Normalize), saved as a sentence-transformers folder
- :mod:`.train_embed`  ``bertkit train-embed`` (with hard negatives mined by the current model)
- :mod:`.rerank`       ``bertkit train-rerank``: a cross-encoder on (query, passage, label)
- :mod:`.evaluate`     retrieval evaluation (bi-encoder, optionally re-ranked by a cross-encoder)
"""

from .sts import evaluate_pair_retrieval, evaluate_sts, main, pearson, rankdata, read_sts, spearman

__all__ = ["evaluate_pair_retrieval", "evaluate_sts", "main", "pearson", "rankdata", "read_sts", "spearman"]
