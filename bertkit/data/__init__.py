"""Pre-training data: corpus -> WordPiece vocab -> token shards -> masked-LM / next-sentence instances."""

from bertkit.data.corpus import CorpusStats, iter_documents, read_documents, split_sentences
from bertkit.data.instances import (
    TrainingInstance,
    create_training_instances,
    instances_sha256,
    load_static_instances,
    write_static_instances,
)

__all__ = [
    "CorpusStats",
    "iter_documents",
    "read_documents",
    "split_sentences",
    "TrainingInstance",
    "create_training_instances",
    "instances_sha256",
    "load_static_instances",
    "write_static_instances",
]
