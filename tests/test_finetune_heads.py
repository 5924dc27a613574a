"""Fine-tuning heads: transformers loads what bertkit saves (identical outputs), losses, CRF exactness."""

import itertools

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.heads.finetune import (
    CRF,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)

transformers = pytest.importorskip("transformers")


def _config(num_labels: int, **extra) -> BertConfig:
    c = BertConfig.preset("tiny", vocab_size=120, max_position_embeddings=64)
    c.num_labels = num_labels
    c.extra.update(extra)
    return c


@pytest.mark.parametrize(
    "cls,num_labels",
    [
        (BertForSequenceClassification, 3),
        (BertForSequenceClassification, 1),
        (BertForTokenClassification, 5),
        (BertForQuestionAnswering, 2),
        (BertForMultipleChoice, 2),
    ],
)
def test_transformers_loads_saved_head(tmp_path, cls, num_labels):
    torch.manual_seed(0)
    model = cls(_config(num_labels)).eval()
    with torch.no_grad():  # non-trivial head weights so a dropped/misnamed tensor shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path)
    hf = getattr(transformers, cls.__name__).from_pretrained(tmp_path).eval()
    shape = (2, 3, 9) if cls is BertForMultipleChoice else (2, 9)
    ids = torch.randint(1, 120, shape, generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, ..., 6:] = 0
    types = torch.zeros_like(ids)
    types[..., 4:] = 1
    a = model(ids, attention_mask=mask, token_type_ids=types)
    b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    names = ["start_logits", "end_logits"] if cls is BertForQuestionAnswering else ["logits"]
    for name in names:
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape
        if cls in (BertForTokenClassification, BertForQuestionAnswering):  # padded positions carry no meaning
            x, y = x[mask.bool()], y[mask.bool()]
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4)
    # and back: bertkit loads transformers' save
    hf.save_pretrained(tmp_path / "hf")
    again = cls.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(getattr(again(ids, mask, types), names[0]), getattr(a, names[0]))


def test_losses_follow_transformers_conventions():
    torch.manual_seed(0)
    ids = torch.randint(1, 120, (4, 7))
    m = BertForSequenceClassification(_config(3)).eval()
    out = m(ids, labels=torch.tensor([0, 2, 1, 1]))
    assert m.config.problem_type == "single_label_classification"
    ref = torch.nn.functional.cross_entropy(out.logits, torch.tensor([0, 2, 1, 1]))
    torch.testing.assert_close(out.loss, ref)
    assert out[0] is out.loss and out[1] is out.logits  # tuple-style access like transformers

    r = BertForSequenceClassification(_config(1)).eval()
    y = torch.tensor([0.5, 1.0, 2.0, 3.0])
    out = r(ids, labels=y)
    assert r.config.problem_type == "regression" and out.logits.shape == (4, 1)
    torch.testing.assert_close(out.loss, ((out.logits[:, 0] - y) ** 2).mean())

    t = BertForTokenClassification(_config(4)).eval()
    labels = torch.full((4, 7), -100)
    labels[:, 1] = 2
    out = t(ids, labels=labels)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits[:, 1], labels[:, 1]))

    q = BertForQuestionAnswering(_config(2)).eval()
    out = q(ids, start_positions=torch.tensor([1, 2, 99, 0]), end_positions=torch.tensor([3, 2, 99, 0]))
    s, e = out.start_logits, out.end_logits
    keep = torch.tensor([0, 1, 3])  # 99 is outside the sequence: ignored
    ref = (
        torch.nn.functional.cross_entropy(s[keep], torch.tensor([1, 2, 0]))
        + torch.nn.functional.cross_entropy(e[keep], torch.tensor([3, 2, 0]))
    ) / 2
    torch.testing.assert_close(out.loss, ref)

    mc = BertForMultipleChoice(_config(2)).eval()
    out = mc(torch.randint(1, 120, (2, 4, 6)), labels=torch.tensor([3, 0]))
    assert out.logits.shape == (2, 4)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([3, 0])))


def test_crf_matches_brute_force():
    torch.manual_seed(0)
    L, T = 3, 4
    crf = CRF(L)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn_like(p))
    em = torch.randn(2, T, L)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0]])

    def score(row, seq):
        s = crf.start_transitions[seq[0]] + em[row, 0, seq[0]]
        for t in range(1, len(seq)):
            s = s + crf.transitions[seq[t - 1], seq[t]] + em[row, t, seq[t]]
        return s + crf.end_transitions[seq[-1]]

    nll, best = [], []
    for row, n in enumerate([4, 3]):
        all_seqs = list(itertools.product(range(L), repeat=n))
        scores = torch.stack([score(row, s) for s in all_seqs])
        nll.append(torch.logsumexp(scores, 0) - score(row, tags[row, :n].tolist()))
        best.append(list(all_seqs[int(scores.argmax())]))
    torch.testing.assert_close(crf.neg_log_likelihood(em, tags, mask), torch.stack(nll).mean())
    assert crf.viterbi(em, mask) == best


def test_crf_token_head_uses_labelled_positions(tmp_path):
    torch.manual_seed(0)
    m = BertForTokenClassification(_config(3, use_crf=True)).eval()
    assert m.crf is not None
    ids = torch.randint(1, 120, (2, 8))
    labels = torch.full((2, 8), -100)
    labels[0, [1, 2, 5]] = torch.tensor([1, 2, 0])
    labels[1, [1, 3]] = torch.tensor([0, 1])
    out = m(ids, labels=labels)
    em, cmask, clab, _ = CRF.compact(out.logits, labels != -100, labels)
    assert clab[0].tolist() == [1, 2, 0] and clab[1, :2].tolist() == [0, 1] and cmask.sum().item() == 5
    torch.testing.assert_close(out.loss, m.crf.neg_log_likelihood(em, clab, cmask))
    paths = m.decode(out.logits, labels != -100)
    assert [len(p) for p in paths] == [3, 2]
    # the CRF setting survives a save/load round trip (config.json key use_crf)
    m.save_pretrained(tmp_path)
    again = BertForTokenClassification.from_pretrained(tmp_path)
    assert again.crf is not None
    torch.testing.assert_close(again.crf.transitions, m.crf.transitions)
