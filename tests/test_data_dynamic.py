"""Dynamic instances: statistics on large samples, invariants, determinism, splits, DDP sharding, batches."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from bertkit.data import EpochSampler, PretrainingDataset, collate_pretraining, prepare

N_DOCS, N_WORDS = 40, 12
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Synthetic corpus: document d only uses words d{d}w{i} (some with '##s' / '##ing' pieces)."""
    root = tmp_path_factory.mktemp("dyn")
    vocab = SPECIALS + [f"d{d}w{i}" for d in range(N_DOCS) for i in range(N_WORDS)] + ["##s", "##ing"]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    rng = random.Random(0)
    with open(root / "corpus.txt", "w", encoding="utf-8") as f:
        for d in range(N_DOCS):
            for _ in range(rng.randint(1, 30)):
                words = [
                    f"d{d}w{rng.randrange(N_WORDS)}{rng.choice(['', '', 's', 'ings'])}"
                    for _ in range(rng.randint(3, 30))
                ]
                f.write(" ".join(words) + "\n")
            f.write("\n")
    prepare([root / "corpus.txt"], root / "vocab.txt", root / "data", shard_size_mb=0.01, progress=False)
    return root / "data"


def doc_of_ids(ids, n_specials=5):
    """Documents of the word tokens among ``ids`` ('##' pieces and specials carry none)."""
    ids = np.asarray(ids)
    ids = ids[(ids >= n_specials) & (ids < n_specials + N_DOCS * N_WORDS)]
    return (ids - n_specials) // N_WORDS


def originals(item):
    return np.where(item["labels"] != -100, item["labels"], item["input_ids"])


def binomial_ok(k, n, p, z=4.5):
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


def sample(ds, n=None):
    n = len(ds) if n is None else min(n, len(ds))
    return [ds[i] for i in range(n)]


def test_invariants_and_statistics(data_dir):
    ds = PretrainingDataset(data_dir, max_seq_length=64, max_predictions_per_seq=8, split="all")
    assert len(ds.shards.manifest["shards"]) > 1
    masked = kept = rnd = total = 0
    nsp_random = nsp_n = 0
    for epoch in range(5):
        ds.set_epoch(epoch)
        for i, item in enumerate(sample(ds)):
            ids, labels, types = item["input_ids"], item["labels"], item["token_type_ids"]
            n = len(ids)
            assert n <= 64 and len(labels) == len(types) == n
            orig = originals(item)
            seps = np.flatnonzero(orig == ds.sep_id)
            assert orig[0] == ds.cls_id and len(seps) == 2 and seps[1] == n - 1
            assert np.all(types[: seps[0] + 1] == 0) and np.all(types[seps[0] + 1 :] == 1)
            pos = np.flatnonzero(labels != -100)
            assert len(pos) == min(8, max(1, int(round(n * 0.15))))  # exactly the original's count
            assert not np.isin(pos, [0, seps[0], n - 1]).any()  # specials never masked
            docs_a = set(doc_of_ids(orig[1 : seps[0]]).tolist())
            docs_b = set(doc_of_ids(orig[seps[0] + 1 : -1]).tolist())
            assert len(docs_a) <= 1 and len(docs_b) <= 1  # (a trimmed segment may hold only '##' pieces)
            label = int(item["next_sentence_label"])
            if docs_a and docs_b:
                assert (docs_a != docs_b) == bool(label)  # random next: always another document
            c = ds.offset + i
            if ds.chunk_hi[c] - ds.chunk_lo[c] >= 2:
                nsp_n += 1
                nsp_random += label
            got = ids[pos]
            masked += int((got == ds.mask_id).sum())
            kept += int((got == labels[pos]).sum())
            rnd += int(((got != ds.mask_id) & (got != labels[pos])).sum())
            total += len(pos)
    assert total > 10000 and nsp_n > 500
    v = ds.vocab_size
    assert binomial_ok(masked, total, 0.8)
    assert binomial_ok(kept, total, 0.1 + 0.1 / v)
    assert binomial_ok(rnd, total, 0.1 - 0.1 / v)
    assert binomial_ok(nsp_random, nsp_n, 0.5)


def test_selection_rate_and_short_sequences(data_dir):
    ds = PretrainingDataset(data_dir, max_seq_length=128, max_predictions_per_seq=1000, short_seq_prob=0.3)
    items = sample(ds)
    lengths = np.array([len(x["input_ids"]) for x in items])
    n_pred = np.array([(x["labels"] != -100).sum() for x in items])
    rate = n_pred.sum() / lengths.sum()
    assert abs(rate - 0.15) < 0.01
    assert (lengths < 40).mean() > 0.05  # short targets happen


def test_whole_word_masking(data_dir):
    ds = PretrainingDataset(data_dir, max_seq_length=64, whole_word_mask=True, split="all")
    cont = ds.is_continuation
    n_multi = 0
    for item in sample(ds):
        orig = originals(item)
        chosen = item["labels"] != -100
        for p in np.flatnonzero(chosen):
            s, e = p, p + 1
            while cont[orig[s]] and s > 0:
                s -= 1
            while e < len(orig) and cont[orig[e]]:
                e += 1
            if orig[s] in (ds.cls_id, ds.sep_id):  # a word cut by truncation may start with '##'
                s += 1
            assert chosen[s:e].all()
            n_multi += e - s > 1
        assert chosen.sum() <= 20
    assert n_multi > 100


def test_determinism_in_seed_epoch_index(data_dir):
    a = PretrainingDataset(data_dir, seed=3)
    b = PretrainingDataset(data_dir, seed=3)
    for i in (0, 7, len(a) - 1):
        for k in a[i]:
            np.testing.assert_array_equal(a[i][k], b[len(b) - len(b) + i][k])
    x = [a[i]["input_ids"] for i in range(20)]
    a.set_epoch(1)
    y = [a[i]["input_ids"] for i in range(20)]
    assert sum(not np.array_equal(p, q) for p, q in zip(x, y)) > 15
    c = PretrainingDataset(data_dir, seed=4)
    assert sum(not np.array_equal(p, c[i]["input_ids"]) for i, p in enumerate(x)) > 15
    a.set_epoch(0)
    assert all(np.array_equal(p, a[i]["input_ids"]) for i, p in enumerate(x))  # order of access is irrelevant


def test_ranks_partition_the_chunks(data_dir):
    full = PretrainingDataset(data_dir, seed=1)
    parts = [PretrainingDataset(data_dir, seed=1, rank=r, world_size=3) for r in range(3)]
    assert len({len(p) for p in parts}) == 1 and 3 * len(parts[0]) <= len(full) < 3 * len(parts[0]) + 3
    for r, p in enumerate(parts):  # rank r's item i is the full dataset's item r*len+i
        for i in (0, len(p) - 1):
            np.testing.assert_array_equal(p[i]["input_ids"], full[r * len(p) + i]["input_ids"])


def test_splits_are_disjoint_and_valid_is_fixed(data_dir):
    train = PretrainingDataset(data_dir, split="train", valid_documents=4)
    valid = PretrainingDataset(data_dir, split="valid", valid_documents=4)
    assert set(train.chunk_doc.tolist()).isdisjoint(valid.chunk_doc.tolist())
    assert set(valid.chunk_doc.tolist()) == set(range(N_DOCS - 4, N_DOCS))
    before = [valid[i]["input_ids"] for i in range(len(valid))]
    valid.set_epoch(5)
    assert all(np.array_equal(p, valid[i]["input_ids"]) for i, p in enumerate(before))
    for item in sample(valid):  # random-next B stays within the split
        assert set(doc_of_ids(originals(item)[1:-1]).tolist()) - {(3 - 5) // N_WORDS} <= set(
            range(36, 40)
        ) | {-1}


def test_no_nsp_single_contiguous_segment(data_dir):
    ds = PretrainingDataset(data_dir, max_seq_length=64, no_nsp=True)
    for item in sample(ds, 300):
        orig = originals(item)
        assert "next_sentence_label" not in item and len(orig) <= 64
        assert orig[0] == ds.cls_id and orig[-1] == ds.sep_id and (orig[1:-1] != ds.sep_id).all()
        assert (item["token_type_ids"] == 0).all() and len(set(doc_of_ids(orig[1:-1]).tolist())) == 1
    assert np.mean([len(x["input_ids"]) for x in sample(ds, 300)]) > 40  # chunks fill the sequence


def test_collate_and_dataloader(data_dir):
    ds = PretrainingDataset(data_dir, max_seq_length=32)
    sampler = EpochSampler(ds, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler, collate_fn=ds.collate)
    batch = next(iter(loader))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label"}
    assert all(v.dtype == torch.long for v in batch.values())
    b, t = batch["input_ids"].shape
    assert b == 8 and t <= 32 and batch["next_sentence_label"].shape == (8,)
    pad = batch["attention_mask"] == 0
    assert (batch["labels"][pad] == -100).all() and (batch["input_ids"][pad] == ds.pad_id).all()
    order = sampler.order()
    first = collate_pretraining([ds[int(i)] for i in order[:8]])
    for k in batch:
        assert torch.equal(batch[k], first[k])
    sampler.set_epoch(1, start=8)  # resume mid-epoch: the same items as a full epoch-1 pass minus 8
    resumed = list(iter(sampler))
    sampler.set_epoch(1)
    assert resumed == list(iter(sampler))[8:] and ds.epoch == 1


@pytest.mark.parametrize("options", [{}, {"whole_word_mask": True}, {"no_nsp": True}])
def test_batch_draw_equals_single_items(data_dir, options):
    """An item depends only on (seed, epoch, index): drawn alone or in any batch, it is the same."""
    ds = PretrainingDataset(data_dir, max_seq_length=48, seed=5, **options)
    ds.set_epoch(2)
    idx = np.random.default_rng(0).permutation(len(ds))[:40].tolist()
    batch = ds.__getitems__(idx)
    collated = ds.collate(batch)
    slow = collate_pretraining([dict(item) for item in batch], pad_id=ds.pad_id)  # the generic padding path
    for k in collated:
        assert torch.equal(collated[k], slow[k])
    for i, item in zip(idx, batch):
        single = ds[i]
        assert single.keys() == item.keys()
        for k in item:
            np.testing.assert_array_equal(single[k], item[k])
