"""Held-out fill-mask scoring and its unigram baseline (make run's "did it learn?"), and the demo's
random-init twin."""

from __future__ import annotations

import torch

from bertkit.config import BertConfig
from bertkit.demo import random_model
from bertkit.heads.pretraining import BertForMaskedLM, BertForPreTraining
from bertkit.mlm_eval import heldout_mlm, most_frequent_masked_token
from bertkit.tokenizer import Tokenizer


def _model(tiny_data, path, bias_token=None):
    tok = Tokenizer(str(tiny_data / "vocab.txt"))
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.preset("tiny", vocab_size=len(tok), max_position_embeddings=64))
    if bias_token is not None:  # a model that fills every blank with the same token
        with torch.no_grad():
            model.cls.predictions.bias[bias_token] = 1e4
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_model_that_always_says_the_unigram_scores_exactly_the_baseline(tiny_data, tmp_path):
    top = most_frequent_masked_token(tiny_data, 64, None, seed=1234)
    r = heldout_mlm(_model(tiny_data, tmp_path / "m", bias_token=top), tiny_data, 64, max_batches=3)
    assert r["distinct_predictions"] == 1
    assert r["mlm_accuracy"] == r["unigram_accuracy"] > 0
    assert r["masked_tokens"] > 0 and r["mlm_perplexity"] > 1


def test_scores_are_the_same_masks_for_every_model(tiny_data, tmp_path):
    a = heldout_mlm(_model(tiny_data, tmp_path / "a"), tiny_data, 64, max_batches=2)
    b = heldout_mlm(_model(tiny_data, tmp_path / "b"), tiny_data, 64, max_batches=2)
    assert a == b  # same weights, same held-out masks: bitwise the same scores
    assert a["distinct_predictions"] > 1 and a["unigram_accuracy"] == b["unigram_accuracy"]


def test_random_twin_has_the_shape_and_vocabulary_but_not_the_weights(tiny_data, tmp_path):
    like = _model(tiny_data, tmp_path / "trained")
    twin = random_model(tmp_path / "twin", like, seed=3)
    shape = (
        "num_hidden_layers",
        "hidden_size",
        "vocab_size",
        "max_position_embeddings",
        "hidden_dropout_prob",
    )
    t, lk = BertConfig.from_pretrained(twin).to_dict(), BertConfig.from_pretrained(like).to_dict()
    assert {k: t[k] for k in shape} == {k: lk[k] for k in shape}
    assert (twin / "vocab.txt").read_text() == (like / "vocab.txt").read_text()
    a = BertForPreTraining.from_pretrained(like).state_dict()
    b = BertForPreTraining.from_pretrained(twin).state_dict()
    assert not torch.equal(
        a["bert.embeddings.word_embeddings.weight"], b["bert.embeddings.word_embeddings.weight"]
    )
    again = BertForPreTraining.from_pretrained(random_model(tmp_path / "twin2", like, seed=3)).state_dict()
    assert all(torch.equal(b[k], again[k]) for k in b)  # the seed decides the weights
