"""Pre-training data: corpus -> WordPiece vocab -> token shards -> masked-LM / next-sentence instances.

- :mod:`bertkit.data.corpus`: ``iter_documents(paths, fmt, on_error)`` streams documents (lists of sentences).
- :mod:`bertkit.data.vocab`: ``train_vocab(paths, vocab_size, out, lowercase)`` (``bertkit vocab``).
- :mod:`bertkit.data.shards`: ``prepare(...)`` (``bertkit prepare``) and ``ShardSet`` (memory-mapped shards).
- :mod:`bertkit.data.instances`: the static path, the original release's algorithm step for step
  (``create_training_instances``), and its ``.npz`` writer.
- :mod:`bertkit.data.dynamic`: ``PretrainingDataset`` + ``collate_pretraining`` + ``EpochSampler``, the
  default on-the-fly path used by pre-training (see that module's docstring for the API).
"""

from bertkit.data.corpus import CorpusStats, iter_documents, read_documents, split_sentences
from bertkit.data.dynamic import EpochSampler, PretrainingDataset, collate_pretraining
from bertkit.data.instances import (
    TrainingInstance,
    create_static_from_shards,
    create_training_instances,
    instances_sha256,
    load_static_instances,
    write_static_instances,
)
from bertkit.data.shards import ShardSet, prepare
from bertkit.data.vocab import train_vocab

__all__ = [
    "CorpusStats",
    "iter_documents",
    "read_documents",
    "split_sentences",
    "EpochSampler",
    "PretrainingDataset",
    "collate_pretraining",
    "TrainingInstance",
    "create_static_from_shards",
    "create_training_instances",
    "instances_sha256",
    "load_static_instances",
    "write_static_instances",
    "ShardSet",
    "prepare",
    "train_vocab",
]
