"""Static masked-LM / next-sentence instances: the original release's algorithm, step for step.

Given the same documents, vocabulary list and ``random.Random(seed)``, :func:`create_training_instances`
returns the same instance stream as google-research/bert's ``create_pretraining_data.py`` (it draws from the
rng in the same order: shuffle of documents; per document a short-target draw; per chunk the split point,
the random-next coin, the random document and start, the truncation coins; per instance the shuffle of
candidate words and the 80/10/10 draws; finally the shuffle of all instances).

The algorithm is written once, generic over the token type, so the same code runs on WordPiece strings
(the parity API) and on integer ids read from shards (``write_static_instances``/``create_static_from_shards``,
much less memory, the same stream once mapped through the vocabulary).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.io import atomic_write


def _shuffle_fast(rng: random.Random, x: list) -> None:
    """``rng.shuffle(x)`` with the same draws (CPython's Fisher-Yates over ``getrandbits``), fewer calls."""
    getrandbits = rng.getrandbits
    for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = n.bit_length()
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        x[i], x[r] = x[r], x[i]


def _randint_fast(rng: random.Random, a: int, b: int) -> int:
    """``rng.randint(a, b)`` with the same draws."""
    n = b - a + 1
    k = n.bit_length()
    r = rng.getrandbits(k)
    while r >= n:
        r = rng.getrandbits(k)
    return a + r


def _fast_path_is_exact() -> bool:
    """The fast helpers reproduce this Python's ``random.Random`` exactly (checked once at import)."""
    a, b = random.Random(1234), random.Random(1234)
    for n in (1, 2, 3, 7, 64, 129, 1000):
        x, y = list(range(n)), list(range(n))
        a.shuffle(x)
        _shuffle_fast(b, y)
        if x != y or a.randint(0, n) != _randint_fast(b, 0, n) or a.random() != b.random():
            return False
    return True


_FAST_OK = _fast_path_is_exact()


def _draws(rng: random.Random) -> tuple[Callable[[list], None], Callable[[int, int], int]]:
    """``(shuffle, randint)`` of ``rng``: the fast helpers where they reproduce it exactly, else its own."""
    if _FAST_OK and type(rng) is random.Random:
        return (lambda x: _shuffle_fast(rng, x)), (lambda a, b: _randint_fast(rng, a, b))
    return rng.shuffle, rng.randint


__all__ = [
    "TrainingInstance",
    "create_training_instances",
    "create_instances_from_document",
    "create_masked_lm_predictions",
    "truncate_seq_pair",
    "instances_to_arrays",
    "write_static_instances",
    "load_static_instances",
    "instances_sha256",
    "create_static_from_shards",
]


@dataclass
class TrainingInstance:
    """One sentence pair: ``tokens`` = [CLS] A [SEP] B [SEP] after masking."""

    tokens: list
    segment_ids: list[int]
    is_random_next: bool
    masked_lm_positions: list[int]
    masked_lm_labels: list


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random) -> None:
    """Trim the longer list (B on ties) one token at a time, from the front or back by a coin, in place."""
    rand = rng.random
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if not longer:
            raise AssertionError("cannot truncate an empty segment")
        if rand() < 0.5:
            del longer[0]
        else:
            longer.pop()


def create_masked_lm_predictions(
    tokens: list,
    masked_lm_prob: float,
    max_predictions_per_seq: int,
    vocab_words: Sequence,
    rng: random.Random,
    whole_word_mask: bool = False,
    *,
    cls_token: Hashable = "[CLS]",
    sep_token: Hashable = "[SEP]",
    mask_token: Hashable = "[MASK]",
    is_continuation: Callable[[object], bool] | None = None,
) -> tuple[list, list[int], list]:
    """Choose and corrupt the masked-LM positions; returns (output_tokens, positions, labels)."""
    shuffle, randint = _draws(rng)
    rand = rng.random
    last_vocab = len(vocab_words) - 1
    output = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    if not whole_word_mask:
        # The same draws as the word loop below with one-position words, written apart because it is the
        # hot path of static data: shuffling positions rather than one-element lists is ~25% faster.
        cands = [pos for pos, tok in enumerate(tokens) if tok != cls_token and tok != sep_token]
        shuffle(cands)
        chosen = cands[:num_to_predict]
        for pos in chosen:
            if rand() < 0.8:
                output[pos] = mask_token
            elif rand() < 0.5:
                pass  # keep the original token
            else:
                output[pos] = vocab_words[randint(0, last_vocab)]
        chosen.sort()
        return output, chosen, [tokens[p] for p in chosen]
    if is_continuation is None:
        is_continuation = _starts_with_hashes
    # Candidate words: lists of positions; a '##' piece joins the previous word.
    words: list[list[int]] = []
    for pos, tok in enumerate(tokens):
        if tok == cls_token or tok == sep_token:
            continue
        if words and is_continuation(tok):
            words[-1].append(pos)
        else:
            words.append([pos])
    shuffle(words)
    chosen: list[int] = []
    for word in words:
        if len(chosen) >= num_to_predict:
            break
        if len(chosen) + len(word) > num_to_predict:
            continue
        # Words are disjoint position sets, so no position can already be covered.
        for pos in word:
            if rand() < 0.8:
                output[pos] = mask_token
            elif rand() < 0.5:
                pass  # keep the original token
            else:
                output[pos] = vocab_words[randint(0, last_vocab)]
            chosen.append(pos)
    chosen.sort()
    return output, chosen, [tokens[p] for p in chosen]


def _starts_with_hashes(tok: object) -> bool:
    return isinstance(tok, str) and tok.startswith("##")


def create_instances_from_document(
    all_documents: Sequence[Sequence[list]],
    document_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    masked_lm_prob: float,
    max_predictions_per_seq: int,
    vocab_words: Sequence,
    rng: random.Random,
    whole_word_mask: bool = False,
    *,
    cls_token: Hashable = "[CLS]",
    sep_token: Hashable = "[SEP]",
    mask_token: Hashable = "[MASK]",
    is_continuation: Callable[[object], bool] | None = None,
) -> list[TrainingInstance]:
    """All instances of one document (chunks of sentences up to a target length, NSP pairs, masks)."""
    document = all_documents[document_index]
    randint = _draws(rng)[1]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = randint(2, max_num_tokens)

    instances: list[TrainingInstance] = []
    chunk: list[list] = []
    chunk_len = 0
    n_sent = len(document)
    last_doc = len(all_documents) - 1
    i = 0
    while i < n_sent:
        sentence = document[i]
        chunk.append(sentence)
        chunk_len += len(sentence)
        if i == n_sent - 1 or chunk_len >= target_seq_length:
            if chunk:
                a_end = randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a = [t for seg in chunk[:a_end] for t in seg]
                tokens_b: list = []
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    # Up to ten tries for a different document (the original gives up after ten).
                    for _ in range(10):
                        other = randint(0, last_doc)
                        if other != document_index:
                            break
                    other_doc = all_documents[other]
                    for j in range(randint(0, len(other_doc) - 1), len(other_doc)):
                        tokens_b.extend(other_doc[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The segments after the split point were not used: revisit them.
                    i -= len(chunk) - a_end
                else:
                    is_random_next = False
                    for seg in chunk[a_end:]:
                        tokens_b.extend(seg)
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if not tokens_a or not tokens_b:
                    raise AssertionError("empty segment after truncation")
                tokens = [cls_token, *tokens_a, sep_token, *tokens_b, sep_token]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels = create_masked_lm_predictions(
                    tokens,
                    masked_lm_prob,
                    max_predictions_per_seq,
                    vocab_words,
                    rng,
                    whole_word_mask,
                    cls_token=cls_token,
                    sep_token=sep_token,
                    mask_token=mask_token,
                    is_continuation=is_continuation,
                )
                instances.append(TrainingInstance(tokens, segment_ids, is_random_next, positions, labels))
            chunk = []
            chunk_len = 0
        i += 1
    return instances


def create_training_instances(
    documents: Sequence[Sequence[Sequence]],
    vocab_words: Sequence,
    max_seq_length: int,
    dupe_factor: int,
    short_seq_prob: float,
    masked_lm_prob: float,
    max_predictions_per_seq: int,
    rng: random.Random,
    whole_word_mask: bool = False,
    *,
    cls_token: Hashable = "[CLS]",
    sep_token: Hashable = "[SEP]",
    mask_token: Hashable = "[MASK]",
    is_continuation: Callable[[object], bool] | None = None,
) -> list[TrainingInstance]:
    """The original release's static instances.

    ``documents``: documents in reading order, each a list of sentences, each a list of WordPiece tokens
    (strings; or ids together with ``cls_token``/``sep_token``/``mask_token`` ids, ``vocab_words`` =
    ``range(vocab_size)`` and an ``is_continuation`` predicate for whole-word masking). Empty sentences and
    empty documents are dropped; the documents are shuffled with ``rng``; ``dupe_factor`` passes over all
    documents; the instances are shuffled with ``rng`` at the end.
    """
    all_documents = [[list(s) for s in doc if len(s)] for doc in documents]
    all_documents = [d for d in all_documents if d]
    shuffle = _draws(rng)[0]
    shuffle(all_documents)
    if isinstance(vocab_words, dict):
        vocab_words = list(vocab_words)
    instances: list[TrainingInstance] = []
    for _ in range(dupe_factor):
        for doc_index in range(len(all_documents)):
            instances.extend(
                create_instances_from_document(
                    all_documents,
                    doc_index,
                    max_seq_length,
                    short_seq_prob,
                    masked_lm_prob,
                    max_predictions_per_seq,
                    vocab_words,
                    rng,
                    whole_word_mask,
                    cls_token=cls_token,
                    sep_token=sep_token,
                    mask_token=mask_token,
                    is_continuation=is_continuation,
                )
            )
    shuffle(instances)
    return instances


def instances_to_arrays(
    instances: Sequence[TrainingInstance],
    max_seq_length: int,
    max_predictions_per_seq: int,
    token_to_id: Callable[[object], int] | dict | None = None,
) -> dict[str, np.ndarray]:
    """Pad instances into the original fixed-size feature arrays (names as the original's TF features).

    ``token_to_id``: a vocab dict or function for string tokens; ``None`` when the tokens already are ids.
    """
    n = len(instances)
    if isinstance(token_to_id, dict):
        token_to_id = token_to_id.__getitem__
    out = {
        "input_ids": np.zeros((n, max_seq_length), dtype=np.int32),
        "input_mask": np.zeros((n, max_seq_length), dtype=np.int8),
        "segment_ids": np.zeros((n, max_seq_length), dtype=np.int8),
        "masked_lm_positions": np.zeros((n, max_predictions_per_seq), dtype=np.int32),
        "masked_lm_ids": np.zeros((n, max_predictions_per_seq), dtype=np.int32),
        "masked_lm_weights": np.zeros((n, max_predictions_per_seq), dtype=np.float32),
        "next_sentence_labels": np.zeros((n,), dtype=np.int8),
    }
    for k, inst in enumerate(instances):
        ids, labels = inst.tokens, inst.masked_lm_labels
        if token_to_id is not None:
            ids, labels = [token_to_id(t) for t in ids], [token_to_id(t) for t in labels]
        length = len(ids)
        if length > max_seq_length:
            raise ValueError(f"instance {k} has {length} tokens > max_seq_length {max_seq_length}")
        m = len(inst.masked_lm_positions)
        out["input_ids"][k, :length] = ids
        out["input_mask"][k, :length] = 1
        out["segment_ids"][k, :length] = inst.segment_ids
        out["masked_lm_positions"][k, :m] = inst.masked_lm_positions
        out["masked_lm_ids"][k, :m] = labels
        out["masked_lm_weights"][k, :m] = 1.0
        out["next_sentence_labels"][k] = 1 if inst.is_random_next else 0
    return out


def write_static_instances(
    instances: Sequence[TrainingInstance],
    path: str | Path,
    max_seq_length: int,
    max_predictions_per_seq: int,
    token_to_id: Callable[[object], int] | dict | None = None,
) -> dict:
    """Write instances as one ``.npz`` with the original features (atomic); returns counts."""
    arrays = instances_to_arrays(instances, max_seq_length, max_predictions_per_seq, token_to_id)
    with atomic_write(path, "wb") as f:
        np.savez(f, **arrays)
    return {"path": str(path), "instances": len(instances)}


def load_static_instances(path: str | Path) -> dict[str, np.ndarray]:
    """Read back a file written by :func:`write_static_instances`."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def instances_sha256(instances: Sequence[TrainingInstance]) -> str:
    """A fingerprint of an instance stream (order, tokens, segments, NSP labels, positions, labels)."""
    import hashlib

    h = hashlib.sha256()
    for inst in instances:
        line = "\t".join(
            (
                " ".join(map(str, inst.tokens)),
                " ".join(map(str, inst.segment_ids)),
                "1" if inst.is_random_next else "0",
                " ".join(map(str, inst.masked_lm_positions)),
                " ".join(map(str, inst.masked_lm_labels)),
            )
        )
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def create_static_from_shards(
    data_dir: str | Path,
    out: str | Path,
    max_seq_length: int = 128,
    dupe_factor: int = 10,
    short_seq_prob: float = 0.1,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
    seed: int = 12345,
    whole_word_mask: bool = False,
) -> dict:
    """The static path on prepared shards: the original's instance stream (on ids, with
    ``random.Random(seed)``), ``dupe_factor`` passes, written as one ``.npz`` with the original features.

    Like the original it holds all documents and instances in memory; the dynamic path does not."""
    from bertkit.data.shards import ShardSet

    shards = ShardSet(data_dir)
    words = shards.vocab_words()
    index = {w: i for i, w in enumerate(words)}
    is_cont = [w.startswith("##") for w in words]
    documents = [[s.tolist() for s in doc] for doc in shards.iter_documents()]
    instances = create_training_instances(
        documents,
        range(len(words)),
        max_seq_length,
        dupe_factor,
        short_seq_prob,
        masked_lm_prob,
        max_predictions_per_seq,
        random.Random(seed),
        whole_word_mask,
        cls_token=index["[CLS]"],
        sep_token=index["[SEP]"],
        mask_token=index["[MASK]"],
        is_continuation=is_cont.__getitem__,
    )
    result = write_static_instances(instances, out, max_seq_length, max_predictions_per_seq)
    result.update(documents=len(documents), dupe_factor=dupe_factor, seed=seed)
    return result
