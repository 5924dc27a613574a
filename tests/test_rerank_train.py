"""The cross-encoder path end to end: ``train_rerank`` trains what sentence-transformers' ``CrossEncoder.fit``
trains (same pair order, token types, label sense, loss, head saved and loaded), and re-ranking inside
``evaluate_retrieval`` puts the passage the cross-encoder scores highest first, mapped back to its corpus id."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from test_retrieval_train import FILLER, TOPICS, VOCAB, synthetic

from bertkit.config import BertConfig
from bertkit.heads.finetune import BertForSequenceClassification
from bertkit.retrieval.evaluate import evaluate_retrieval
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.train_rerank import RerankSettings, train_rerank
from bertkit.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tiny_ce_dir(tmp_path_factory):
    """A tiny random cross-encoder WITH its one-logit head saved (both trainers then start from the same
    weights) and no dropout (training is deterministic)."""
    out = tmp_path_factory.mktemp("tiny_ce") / "ce"
    torch.manual_seed(0)
    cfg = BertConfig.preset(
        "tiny",
        vocab_size=len(VOCAB),
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    cfg.num_labels = 1
    BertForSequenceClassification(cfg).save_pretrained(out)
    Tokenizer.from_vocab(VOCAB).save_pretrained(out)
    return out


def _topic_triples(seed: int) -> list[tuple[str, str, float]]:
    """(query, passage naming an animal, 1) and (query, filler-only passage, 0): separable in a few steps."""
    rng = random.Random(seed)
    triples = []
    for p in synthetic(seed)[0]:
        triples.append((p.query, p.positive, 1.0))
        triples.append((p.query, " ".join(rng.sample(FILLER, 7)), 0.0))
    return triples


def test_train_rerank_equals_sentence_transformers_fit(tiny_ce_dir, tmp_path):
    """Full-batch steps (so batch order cannot differ) from the same weights: bertkit's trained, saved and
    re-loaded model scores every pair as sentence-transformers' model trained in memory. Swapping query and
    passage, flipping the label sense, dropping token types or not saving the head would all break this."""
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("datasets")  # CrossEncoder.fit builds a datasets.Dataset
    triples = _topic_triples(7)[:48]
    lr, steps = 3e-3, 4
    s = RerankSettings(
        epochs=steps, batch_size=len(triples), lr=lr, warmup_ratio=0.0, weight_decay=0.01, max_length=32
    )
    summary = train_rerank(tiny_ce_dir, triples, tmp_path / "ours", s, progress=False)
    assert summary["steps"] == steps
    ours = CrossEncoder.from_pretrained(tmp_path / "ours" / "model", max_length=32)

    torch.manual_seed(0)
    ref = st.CrossEncoder(str(tiny_ce_dir), num_labels=1, max_length=32, device="cpu")
    loader = torch.utils.data.DataLoader(
        [st.InputExample(texts=[q, d], label=y) for q, d, y in triples], batch_size=len(triples)
    )
    ref.fit(
        train_dataloader=loader,
        epochs=steps,
        warmup_steps=0,
        optimizer_params={"lr": lr, "eps": 1e-6},  # bertkit's AdamW epsilon
        weight_decay=0.01,
        max_grad_norm=1.0,
        show_progress_bar=False,
    )
    probe = triples[:16] + [(d, q, y) for q, d, y in triples[:4]]  # the swapped order is a different input
    want = ref.predict([(q, d) for q, d, _ in probe], activation_fn=torch.nn.Identity())
    got = ours.predict([(q, d) for q, d, _ in probe])
    untrained = CrossEncoder.from_pretrained(tiny_ce_dir, max_length=32).predict(
        [(q, d) for q, d, _ in probe]
    )
    assert np.abs(want - untrained).max() > 1e-2  # training moved the scores: the comparison has teeth
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-3)


class _Stub:
    """A bi-encoder that ranks the corpus in a fixed order given by ``rank_of`` (0 = most similar): 2-d
    vectors on the unit circle at growing angles from the query's."""

    def __init__(self, rank_of: dict[str, int]) -> None:
        self.rank_of = rank_of

    def encode(self, texts, batch_size=64, show_progress=False):
        out = []
        for t in texts:
            angle = 0.0 if t not in self.rank_of else 0.1 + 0.2 * self.rank_of[t]
            out.append([np.cos(angle), np.sin(angle)])
        return np.asarray(out, dtype=np.float32)


def test_reranking_puts_the_cross_encoders_best_first_through_the_evaluation(tiny_ce_dir, tmp_path):
    """The bi-encoder stub ranks the one passage that names an animal LAST; a cross-encoder trained to
    score such passages high must move it to rank 1 for every query, through ``evaluate_retrieval``'s
    re-ranking (sort direction and the map from candidate order back to corpus ids both matter: the
    relevant passage sits at corpus position 3, not at the position it has in the bi-encoder's list)."""
    torch.manual_seed(0)
    s = RerankSettings(epochs=10, batch_size=16, lr=2e-3, max_length=32, warmup_ratio=0.0)
    summary = train_rerank(tiny_ce_dir, _topic_triples(4), tmp_path / "r", s, progress=False)
    assert summary["final_loss"] < 0.3
    ce = CrossEncoder.from_pretrained(tmp_path / "r" / "model", max_length=32)

    rng = random.Random(1)
    fillers = [" ".join(rng.sample(FILLER, 7)) for _ in range(11)]
    relevant_text = "the big " + TOPICS[0] + " sits on a red"
    corpus = fillers[:3] + [relevant_text] + fillers[3:]
    ids = [f"p{i}" for i in range(len(corpus))]
    order = [9, 2, 7, 0, 5, 4, 10, 1, 6, 3, 8]  # the bi-encoder's ranks of the fillers, not corpus order
    rank_of = {f: r for f, r in zip(fillers, order)} | {relevant_text: len(corpus) - 1}
    queries = [f"tell me about {t}" for t in TOPICS[:4]]
    relevant = [{json.dumps("p3")}] * len(queries)
    ev = evaluate_retrieval(
        _Stub(rank_of), queries, relevant, ids, corpus, reranker=ce, rerank_top=len(corpus)
    )
    assert ev["bi_encoder"]["recall@1"] == 0.0 and ev["bi_encoder"]["recall@10"] == 0.0  # last of 12
    assert ev["reranked"]["recall@1"] == 100.0 and ev["reranked"]["mrr@10"] == 100.0
    # only the top 11 re-ranked: the relevant passage (12th) stays below them, in bi-encoder order
    ev = evaluate_retrieval(_Stub(rank_of), queries, relevant, ids, corpus, reranker=ce, rerank_top=11)
    assert ev["reranked"]["recall@10"] == 0.0
