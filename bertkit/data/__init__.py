"""Pre-training data: corpus -> WordPiece vocab -> token shards -> masked-LM / next-sentence instances.

- :mod:`bertkit.data.corpus`: ``iter_documents(paths, fmt, on_error)`` streams documents (lists of sentences).
- :mod:`bertkit.data.vocab`: ``train_vocab(paths, vocab_size, out, lowercase)`` (``bertkit vocab``).
- :mod:`bertkit.data.shards`: ``prepare(...)`` (``bertkit prepare``) and ``ShardSet`` (memory-mapped shards);
  :mod:`bertkit.data.shard_build` builds one shard (vocabulary, tokenizer, encoding, its files).
- :mod:`bertkit.data.instances`: the static path, the original release's algorithm step for step
  (``create_training_instances``), and its ``.npz`` writer.
- :mod:`bertkit.data.dynamic`: ``PretrainingDataset`` + ``collate_pretraining`` + ``EpochSampler``, the
  default on-the-fly path used by pre-training (see that module's docstring for the API).
"""

from bertkit.lazy import lazy_getattr

_EXPORTS = {
    "CorpusStats": "corpus",
    "iter_documents": "corpus",
    "read_documents": "corpus",
    "split_sentences": "corpus",
    "EpochSampler": "dynamic",
    "PretrainingDataset": "dynamic",
    "collate_pretraining": "dynamic",
    "TrainingInstance": "instances",
    "create_static_from_shards": "instances",
    "create_training_instances": "instances",
    "instances_sha256": "instances",
    "load_static_instances": "instances",
    "write_static_instances": "instances",
    "ShardSet": "shards",
    "prepare": "shards",
    "train_vocab": "vocab",
}


# Lazy: `prepare` workers and the CLI import only what they use (torch only for the dynamic dataset).
__getattr__ = lazy_getattr(__name__, _EXPORTS)


__all__ = list(_EXPORTS)
