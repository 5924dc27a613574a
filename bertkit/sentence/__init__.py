"""Sentence models: one encoder and one cross-encoder, each used both to predict and to train.

- :mod:`.encoder`        ``SentenceEncoder``: encoder -> pooling -> Dense -> optional Normalize; ``similarity``
- :mod:`.cross_encoder`  ``CrossEncoder``: (query, passage) pairs scored jointly; re-ranking
- :mod:`.folder`         the sentence-transformers folder layout, read and written
- :mod:`.dense`          sentence-transformers' ``Dense`` module
- :mod:`.batching`       padding token-id lists into batch tensors
- :mod:`.data`           training/evaluation files (JSONL) and the SQuAD article split
- :mod:`.losses`         MultipleNegativesRanking (symmetric option), CosineSimilarity, CoSENT
- :mod:`.train_embed`    ``bertkit train-embed`` (with hard negatives mined by the current model)
- :mod:`.train_rerank`   ``bertkit train-rerank``: a cross-encoder on (query, passage, label)

Nothing is imported here, so the CLI can read data files without loading torch.
"""
