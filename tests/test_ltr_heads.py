"""The LTR ablation's fine-tuning heads: the causal mask kept (config "causal") and a BiLSTM on top
(config "head_bilstm"); the feature-based tagger's weighted sum of layers."""

from __future__ import annotations

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.features import BiLSTMTagger
from bertkit.heads.finetune import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)


def _config(**extra) -> BertConfig:
    c = BertConfig.preset("tiny", vocab_size=50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    c.num_labels = 3
    c.extra.update(extra)
    return c


def _ids(g: torch.Generator, b: int = 2, t: int = 9) -> torch.Tensor:
    return torch.randint(5, 50, (b, t), generator=g)


def test_causal_token_head_does_not_look_right():
    torch.manual_seed(0)
    model = BertForTokenClassification(_config(causal=True)).eval()
    g = torch.Generator().manual_seed(1)
    ids = _ids(g)
    changed = ids.clone()
    changed[:, 6:] = _ids(g, t=3)
    a, b = model(ids).logits, model(changed).logits
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-5)  # the left part cannot see the change
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-3)
    # the same weights without the causal mask do look right
    plain = BertForTokenClassification(_config()).eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain(ids).logits[:, :6], plain(changed).logits[:, :6], atol=1e-3)


def test_causal_sequence_head_reads_the_last_real_token_and_ignores_padding():
    torch.manual_seed(0)
    model = BertForSequenceClassification(_config(causal=True)).eval()
    g = torch.Generator().manual_seed(2)
    ids = _ids(g, b=1, t=6)
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 6), torch.zeros(1, 4)], 1).long()
    assert torch.allclose(model(ids).logits, model(padded, attention_mask=mask).logits, atol=1e-5)
    last = ids.clone()
    last[0, -1] = (
        last[0, -1] + 1 - 5
    ) % 45 + 5  # change only the last token: a causal [CLS] would not notice
    assert not torch.allclose(model(ids).logits, model(last).logits, atol=1e-4)


def test_bilstm_head_is_new_and_never_reads_padding():
    torch.manual_seed(0)
    for cls in (BertForTokenClassification, BertForQuestionAnswering, BertForSequenceClassification):
        model = cls(_config(causal=True, head_bilstm=True)).eval()
        assert model.bilstm is not None and any(n.startswith("bilstm.") for n, _ in model.named_parameters())
        g = torch.Generator().manual_seed(3)
        ids = _ids(g, b=1, t=5)
        padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
        mask = torch.cat([torch.ones(1, 5), torch.zeros(1, 3)], 1).long()
        a, b = model(ids), model(padded, attention_mask=mask)
        if cls is BertForQuestionAnswering:
            assert torch.allclose(a.start_logits, b.start_logits[:, :5], atol=1e-5)
        elif cls is BertForTokenClassification:
            assert torch.allclose(a.logits, b.logits[:, :5], atol=1e-5)
        else:
            assert torch.allclose(a.logits, b.logits, atol=1e-5)


def test_ltr_settings_survive_save_and_load(tmp_path):
    model = BertForTokenClassification(_config(causal=True, head_bilstm=True))
    model.save_pretrained(tmp_path)
    again = BertForTokenClassification.from_pretrained(tmp_path)
    assert again.causal and again.bilstm is not None
    for k, v in model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


def test_weighted_sum_tagger_mixes_layers():
    torch.manual_seed(0)
    tagger = BiLSTMTagger(3 * 4, num_labels=2, hidden_size=5, mix=3).eval()
    x = torch.randn(2, 7, 12)
    mean = x.view(2, 7, 3, 4).mean(2)  # zero weights: softmax is uniform, scale 1
    ref = BiLSTMTagger(4, num_labels=2, hidden_size=5).eval()
    ref.load_state_dict({k: v for k, v in tagger.state_dict().items() if not k.startswith("mix_")})
    lengths = torch.tensor([7, 4])
    assert torch.allclose(tagger(x, lengths), ref(mean, lengths), atol=1e-6)
    with torch.no_grad():
        tagger.mix_weights.copy_(torch.tensor([0.0, 0.0, 30.0]))  # all weight on the last layer
    assert torch.allclose(tagger(x, lengths), ref(x[..., 8:], lengths), atol=1e-5)


def test_mean_pooling_head_classifies_the_mean_of_the_real_tokens_states():
    """``classifier_pooling = "mean"``: logits = classifier(mean of the last layer over real tokens), padding
    changes nothing, the first token alone does not decide (unlike [CLS]); an unknown pooling is refused."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(_config(classifier_pooling="mean")).eval()
    g = torch.Generator().manual_seed(3)
    ids = _ids(g, b=1, t=6)
    states = model.bert(ids).last_hidden_state  # [1, 6, H]
    expected = model.classifier(states.mean(1))
    assert torch.allclose(model(ids).logits, expected, atol=1e-5)
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 6), torch.zeros(1, 4)], 1).long()
    assert torch.allclose(model(padded, attention_mask=mask).logits, expected, atol=1e-5)
    cls = BertForSequenceClassification(_config()).eval()
    cls.load_state_dict(model.state_dict())
    assert not torch.allclose(cls(ids).logits, expected, atol=1e-3)  # [CLS] pooling is another vector
    with pytest.raises(ValueError, match="classifier_pooling must be one of"):
        BertForSequenceClassification(_config(classifier_pooling="max"))
