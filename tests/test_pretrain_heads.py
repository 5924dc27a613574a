"""Pre-training heads: sparse == dense MLM, HF names and tying, transformers parity, LTR batches, overfitting."""

from __future__ import annotations

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.heads.pretraining import (
    BertForMaskedLM,
    BertForPreTraining,
    ltr_batch,
    pretraining_metrics,
)


def tiny_config(**kw) -> BertConfig:
    base = dict(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    base.update(kw)
    return BertConfig.from_dict(base)


def make_batch(seed=0, b=4, t=16, vocab=97, pad_last=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    if pad_last:
        mask[-1, t // 2 :] = 0
        ids[-1, t // 2 :] = 0
    labels = torch.full_like(ids, -100)
    pick = (torch.rand(b, t, generator=g) < 0.3) & mask.bool()
    pick[0, 1] = True
    labels[pick] = ids[pick]
    ids = torch.where(pick, torch.full_like(ids, 4), ids)
    types = torch.zeros_like(ids)
    types[:, t // 2 :] = 1
    nsp = torch.randint(0, 2, (b,), generator=g)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": types,
        "labels": labels,
        "next_sentence_label": nsp,
    }


def test_hf_names_and_tied_decoder():
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config())
    names = set(m.state_dict())
    for n in (
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.decoder.weight",
        "cls.predictions.bias",
        "cls.seq_relationship.weight",
        "bert.pooler.dense.weight",
    ):
        assert n in names
    assert m.cls.predictions.decoder.weight is m.bert.embeddings.word_embeddings.weight
    assert torch.count_nonzero(m.cls.predictions.bias) == 0


def test_sparse_and_dense_mlm_give_same_loss_and_gradients():
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config())
    batch = make_batch()
    grads = []
    losses = []
    for sparse in (True, False):
        m.zero_grad()
        out = m(**batch, sparse_mlm=sparse)
        out.loss.backward()
        losses.append(out.loss.detach())
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    n_masked = int((batch["labels"] != -100).sum())
    out = m(**batch)
    assert out.prediction_logits.shape == (n_masked, 97)
    assert out.masked_lm_labels.shape == (n_masked,)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-6)
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], rtol=1e-5, atol=1e-7, msg=n)


def test_loss_is_sum_of_mlm_and_nsp_and_metrics_are_weighted():
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config())
    batch = make_batch()
    out = m(**batch)
    torch.testing.assert_close(out.loss, out.masked_lm_loss + out.next_sentence_loss)
    mets = pretraining_metrics(out, next_sentence_label=batch["next_sentence_label"])
    n = float((batch["labels"] != -100).sum())
    assert mets["masked_lm_accuracy"][1] == n
    assert mets["next_sentence_accuracy"][1] == 4
    assert mets["masked_lm_loss"][0] / n == pytest.approx(float(out.masked_lm_loss.detach()), rel=1e-6)
    only_mlm = m(**{k: v for k, v in batch.items() if k != "next_sentence_label"})
    torch.testing.assert_close(only_mlm.loss, out.masked_lm_loss)
    assert out["loss"] is out.loss and out[0] is out.loss


def test_ltr_batch_unmasks_and_shifts():
    batch = make_batch(pad_last=True)
    ltr = ltr_batch(batch)
    original = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
    assert torch.equal(ltr["input_ids"], original)
    assert torch.equal(ltr["labels"][0, :-1], original[0, 1:])
    assert int(ltr["labels"][0, -1]) == -100
    # padded example: the last real token has no next token
    t = batch["input_ids"].shape[1]
    assert int(ltr["labels"][-1, t // 2 - 1]) == -100 and int(ltr["labels"][-1, t // 2 - 2]) != -100
    assert "next_sentence_label" not in ltr
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config())
    out = m(**ltr, causal=True)
    assert torch.isfinite(out.loss)
    # causal: changing a later token cannot change an earlier position's prediction
    m.eval()
    a = m(ltr["input_ids"][:1], causal=True, sparse_mlm=False).prediction_logits
    ids2 = ltr["input_ids"][:1].clone()
    ids2[0, 10] = 7
    b = m(ids2, causal=True, sparse_mlm=False).prediction_logits
    torch.testing.assert_close(a[0, :10], b[0, :10])
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_transformers_loads_our_checkpoint_with_identical_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config())
    with torch.no_grad():  # a non-trivial output bias, so a lost bias would show
        m.cls.predictions.bias.normal_()
    m.save_pretrained(tmp_path)
    batch = make_batch()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path).eval()
    m.eval()
    with torch.no_grad():
        ours = m(**inputs)
        theirs = hf(**inputs)
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(
            ours.prediction_logits[real], theirs.prediction_logits[real], rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(
            ours.seq_relationship_logits, theirs.seq_relationship_logits, rtol=1e-4, atol=1e-5
        )
        # and the losses agree given both label kinds
        ol = m(**batch).loss
        tl = hf(**batch).loss
        torch.testing.assert_close(ol, tl, rtol=1e-5, atol=1e-5)
        hf_mlm = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
        torch.testing.assert_close(
            ours.prediction_logits[real], hf_mlm(**inputs).logits[real], rtol=1e-4, atol=1e-5
        )
    # and back: our BertForMaskedLM loads transformers' save of the same weights
    hf.save_pretrained(tmp_path / "hf")
    back = BertForMaskedLM.from_pretrained(tmp_path / "hf")
    with torch.no_grad():
        torch.testing.assert_close(
            back(**inputs).logits[real], ours.prediction_logits[real], rtol=1e-4, atol=1e-5
        )


def test_tiny_model_overfits_a_fixed_batch():
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config(hidden_size=64, intermediate_size=128))
    from bertkit.train.optim import build_optimizer

    opt = build_optimizer(m, "adamw", lr=3e-3, weight_decay=0.0)
    batch = make_batch(seed=1, b=8, t=16)
    acc = 0.0
    for _ in range(150):
        out = m(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        mets = pretraining_metrics(out, next_sentence_label=batch["next_sentence_label"])
        acc = mets["masked_lm_accuracy"][0] / mets["masked_lm_accuracy"][1]
        nsp = mets["next_sentence_accuracy"][0] / mets["next_sentence_accuracy"][1]
        if acc == 1.0 and nsp == 1.0:
            break
    assert acc >= 0.99, acc
    assert nsp == 1.0


def test_torch_compile_traces_the_model_and_matches_eager():
    """torch.compile (dynamo and AOT-autograd tracing, "aot_eager" so no code generation and a fast test)
    gives the eager step's loss and gradients; the packing's data-dependent shapes are graph breaks."""
    torch.manual_seed(0)
    m = BertForPreTraining(tiny_config())
    batch = make_batch()
    results = []
    for model in (m, torch.compile(m, backend="aot_eager")):
        m.zero_grad()
        out = model(**batch)
        out.loss.backward()
        results.append(
            (out.loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
        )
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    for n, g in results[0][1].items():
        torch.testing.assert_close(g, results[1][1][n], rtol=1e-4, atol=1e-6, msg=n)


def test_labelled_rows_cross_entropy_equals_torch_and_survives_a_second_backward():
    from bertkit.heads.pretraining import _LabelledRowsCrossEntropy

    torch.manual_seed(0)
    logits = (torch.randn(37, 501) * 4).requires_grad_()
    labels = torch.randint(0, 501, (37,))
    want = torch.nn.functional.cross_entropy(logits, labels)
    (want_grad,) = torch.autograd.grad(want, logits)
    got = _LabelledRowsCrossEntropy.apply(logits, labels)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    first = torch.autograd.grad(got * 3.0, logits, retain_graph=True)[0]
    second = torch.autograd.grad(got * 3.0, logits)[0]  # log-probs recomputed: the first consumed them
    torch.testing.assert_close(first, 3.0 * want_grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(second, first, rtol=0, atol=0)
