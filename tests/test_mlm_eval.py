"""Held-out fill-mask scoring and its unigram baseline (make run's "did it learn?"), and the demo's
random-init twin."""

from __future__ import annotations

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.heads.pretraining import BertForMaskedLM, BertForPreTraining
from bertkit.tokenizer import Tokenizer
from lab.demo import random_model
from lab.mlm_eval import heldout_mlm, masked_token_counts


def _bert(vocab_size: int) -> BertForMaskedLM:
    return BertForMaskedLM(BertConfig.preset("tiny", vocab_size=vocab_size, max_position_embeddings=64))


def _modernbert(vocab_size: int) -> torch.nn.Module:
    from bertkit.modernbert import ModernBertForMaskedLM
    from bertkit.modernbert_config import ModernBertConfig

    return ModernBertForMaskedLM(ModernBertConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=48,
                                                  num_hidden_layers=2, num_attention_heads=2,
                                                  max_position_embeddings=64, local_attention=16, pad_token_id=0))  # fmt: skip


def _model(tiny_data, path, bias_token=None, build=_bert):
    tok = Tokenizer(str(tiny_data / "vocab.txt"))
    torch.manual_seed(0)
    model = build(len(tok))
    if bias_token is not None:  # a model that fills every blank with the same token
        with torch.no_grad():
            bias = model.cls.predictions.bias if isinstance(model, BertForMaskedLM) else model.decoder.bias
            bias[bias_token] = 1e4
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_model_that_always_says_the_unigram_scores_exactly_the_baseline(tiny_data, tmp_path):
    top = masked_token_counts(tiny_data, 64, None, seed=1234, batches=50).most_common(1)[0][0]
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


def test_a_model_blind_to_word_order_gains_nothing_from_it(tiny_data, tmp_path):
    # Without position embeddings a bidirectional encoder sees its context as a bag of words: shuffling the
    # tokens (labels moving with them) changes nothing, so the gain must be 0; with them it must not be.
    path = _model(tiny_data, tmp_path / "m")
    model = BertForMaskedLM.from_pretrained(path)
    with torch.no_grad():  # sharp predictions (the tied decoder x30) that lean on position (x20)
        model.bert.embeddings.word_embeddings.weight.mul_(30)
        model.bert.embeddings.position_embeddings.weight.mul_(20)
    for name in ("ordered", "bag"):
        model.save_pretrained(tmp_path / name)
        Tokenizer.from_pretrained(path).save_pretrained(tmp_path / name)
        with torch.no_grad():
            model.bert.embeddings.position_embeddings.weight.zero_()
    r = heldout_mlm(tmp_path / "ordered", tiny_data, 64, max_batches=2)
    bag = heldout_mlm(tmp_path / "bag", tiny_data, 64, max_batches=2)
    assert abs(bag["word_order_gain"]) <= 1e-4 and abs(bag["shuffled_mlm_loss"] - bag["mlm_loss"]) <= 1e-4
    assert abs(r["word_order_gain"]) > 0.01  # either sign: an untrained model may do better shuffled
    assert (
        abs(r["shuffled_mlm_loss"] - (r["mlm_loss"] + r["word_order_gain"])) < 2e-4
    )  # each rounded to 4 places


def test_unigram_loss_is_the_frequency_baseline(tiny_data, tmp_path):
    import math

    r = heldout_mlm(_model(tiny_data, tmp_path / "m"), tiny_data, 64, max_batches=2)
    vocab = len(Tokenizer(str(tiny_data / "vocab.txt")))
    # frequencies beat the uniform guess (log V) on real text; an untrained model is near uniform
    assert 0 < r["unigram_loss"] < math.log(vocab) - 0.5
    assert r["mlm_loss"] > r["unigram_loss"]


def test_shuffling_keeps_each_sequence_its_tokens_labels_and_ends():
    from lab.mlm_eval import shuffle_within_sequences

    ids = torch.tensor([[101, 5, 6, 7, 8, 9, 102, 0, 0], [101, 11, 12, 13, 14, 15, 16, 17, 102]])
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5] = 6, 15
    mask = (ids != 0).long()
    s_ids, s_labels = shuffle_within_sequences(ids, labels, mask, torch.Generator().manual_seed(0))
    assert (
        s_ids[0, 0] == 101 and s_ids[0, 6] == 102 and s_ids[0, 7:].tolist() == [0, 0] and s_ids[1, 8] == 102
    )
    for i in range(2):
        pairs = sorted(zip(ids[i].tolist(), labels[i].tolist()))
        assert sorted(zip(s_ids[i].tolist(), s_labels[i].tolist())) == pairs  # labels moved with their tokens
    assert not torch.equal(s_ids, ids)


def _modernbert_electra(vocab_size: int) -> torch.nn.Module:
    from bertkit.electra_modernbert import ModernBertElectraModel

    return ModernBertElectraModel(_modernbert(vocab_size).config)


def _bert_electra(vocab_size: int) -> torch.nn.Module:
    from bertkit.electra import ElectraPretrainingModel

    return ElectraPretrainingModel(
        BertConfig.preset("tiny", vocab_size=vocab_size, max_position_embeddings=64)
    )


@pytest.mark.parametrize("build", [_bert_electra, _modernbert_electra])
def test_an_electra_run_is_scored_by_its_generator(tiny_data, tmp_path, build):
    """The saved encoder of an ELECTRA run is the discriminator (no masked-LM head): the held-out masked-LM
    scores are its generator's, BERT's from its ELECTRA layout, ModernBERT's a ModernBertForMaskedLM folder.
    A generator that fills every blank with the most frequent masked token scores exactly the unigram
    baseline; the discriminator folder read as a masked LM would not (its head is random)."""
    from bertkit.objectives import get_objective

    top = masked_token_counts(tiny_data, 64, None, seed=1234, batches=50).most_common(1)[0][0]
    tok = Tokenizer(str(tiny_data / "vocab.txt"))
    torch.manual_seed(0)
    model = build(len(tok))
    with torch.no_grad():
        output_layer = (
            model.generator_decoder if hasattr(model, "generator_decoder") else model.generator_lm_head
        )
        output_layer.bias[top] = 1e4
    run = tmp_path / "model"
    for folder in get_objective("electra").save(model, run):  # as a finished run writes them
        tok.save_pretrained(folder)
    r = heldout_mlm(run, tiny_data, 64, max_batches=3)
    assert r["distinct_predictions"] == 1
    assert r["mlm_accuracy"] == r["unigram_accuracy"] > 0
    assert "word_order_gain" in r and r["masked_tokens"] > 0


def test_a_modernbert_model_is_scored_by_its_own_masked_lm_head(tiny_data, tmp_path):
    top = masked_token_counts(tiny_data, 64, None, seed=1234, batches=50).most_common(1)[0][0]
    r = heldout_mlm(_model(tiny_data, tmp_path / "m", top, _modernbert), tiny_data, 64, max_batches=3)
    # its decoder's bias, not a BERT head's fresh weights, decides every blank
    assert r["distinct_predictions"] == 1
    assert r["mlm_accuracy"] == r["unigram_accuracy"] > 0
    plain = heldout_mlm(_model(tiny_data, tmp_path / "p", build=_modernbert), tiny_data, 64, max_batches=3)
    assert plain["distinct_predictions"] > 1 and plain["masked_tokens"] == r["masked_tokens"]


def test_random_twin_of_a_modernbert_is_a_modernbert(tiny_data, tmp_path):
    from bertkit.modernbert import ModernBertForMaskedLM

    like = _model(tiny_data, tmp_path / "trained", build=_modernbert)
    twin = random_model(tmp_path / "twin", like, seed=3)
    a = ModernBertForMaskedLM.from_pretrained(like).state_dict()
    b = ModernBertForMaskedLM.from_pretrained(twin).state_dict()
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
    assert not torch.equal(
        a["model.embeddings.tok_embeddings.weight"], b["model.embeddings.tok_embeddings.weight"]
    )
    assert (twin / "vocab.txt").read_text() == (like / "vocab.txt").read_text()
