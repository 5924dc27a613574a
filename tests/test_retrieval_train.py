"""Training sentence encoders and re-rankers: the losses against sentence-transformers' own, the saved folder
loaded by sentence-transformers as is (Dense + Normalize included), training that improves retrieval on a
small synthetic task, hard-negative mining, the ranking metrics, the CLI and its errors."""

from __future__ import annotations

import contextlib
import json
import math
import random

import numpy as np
import pytest
import torch

from bertkit import kernels
from bertkit.cli import main as cli_main
from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.model import BertModel
from bertkit.retrieval.evaluate import evaluate_retrieval
from bertkit.retrieval.metrics import query_metrics, retrieval_metrics
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.data import Pair, read_pairs
from bertkit.sentence.dense import Dense
from bertkit.sentence.encoder import SentenceEncoder
from bertkit.sentence.folder import read_modules
from bertkit.sentence.losses import cosent, cosine_loss, mnrl
from bertkit.sentence.train_embed import EmbedSettings, embed_together, mine_hard_negatives, train_embed
from bertkit.sentence.train_rerank import RerankSettings, build_triples, train_rerank
from bertkit.tokenizer import Tokenizer

TOPICS = "cat dog bird fish horse cow sheep goat lion tiger bear wolf fox deer mouse frog".split()
FILLER = "the a is on in big small red blue green old new runs sits eats sleeps".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TOPICS, *FILLER, "about", "tell", "me"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "bert"
    torch.manual_seed(0)
    cfg = BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    BertModel(cfg).save_pretrained(out)
    Tokenizer.from_vocab(VOCAB).save_pretrained(out)
    return out


def synthetic(seed: int, per_topic: int = 4) -> tuple[list[Pair], list[str]]:
    """Queries 'tell me about <topic>' whose positive is a filler sentence holding the topic word."""
    rng = random.Random(seed)
    pairs, corpus = [], []
    for _ in range(per_topic):
        for t in TOPICS:
            words = rng.sample(FILLER, 6)
            words.insert(rng.randrange(7), t)
            doc = " ".join(words)
            pairs.append(Pair(f"tell me about {t}", doc))
            corpus.append(doc)
    return pairs, corpus


# ------------------------------------------------------------------------------------------ losses


def _st_loss_class(name: str):
    return getattr(pytest.importorskip("sentence_transformers.sentence_transformer.losses"), name)


def _st_loss(cls, **kw):
    return _st_loss_class(cls)(model=torch.nn.Identity(), **kw)


def test_losses_equal_sentence_transformers():
    g = torch.Generator().manual_seed(0)
    q, p, n = (torch.randn(6, 8, generator=g) for _ in range(3))
    scores = torch.rand(6, generator=g)
    ref = _st_loss("MultipleNegativesRankingLoss", scale=20.0)
    torch.testing.assert_close(mnrl(q, p), ref.compute_loss_from_embeddings([q, p], None))
    torch.testing.assert_close(mnrl(q, p, n), ref.compute_loss_from_embeddings([q, p, n], None))
    sym = _st_loss("MultipleNegativesSymmetricRankingLoss", scale=20.0)
    torch.testing.assert_close(mnrl(q, p, symmetric=True), sym.compute_loss_from_embeddings([q, p], None))
    torch.testing.assert_close(
        cosent(q, p, scores), _st_loss("CoSENTLoss").compute_loss_from_embeddings([q, p], scores)
    )
    cos_ref = _st_loss("CosineSimilarityLoss").compute_loss_from_embeddings([q, p], scores)
    torch.testing.assert_close(cosine_loss(q, p, scores), cos_ref)
    # CoSENT looks only at the order of the gold scores
    torch.testing.assert_close(cosent(q, p, scores), cosent(q, p, scores * 5 + 1))


# ------------------------------------------------------------------------------------------ metrics


def test_ranking_metrics_by_hand():
    m = query_metrics(["a", "b", "c", "d"], {"c"})
    assert m["recall@1"] == 0 and m["recall@5"] == 1 and m["mrr@10"] == pytest.approx(1 / 3)
    assert m["ndcg@10"] == pytest.approx(1 / np.log2(4))
    two = query_metrics(["x", "a", "y", "b"], {"a", "b"})
    assert two["recall@1"] == 0 and two["recall@5"] == 1 and two["mrr@10"] == 0.5
    ideal = 1 + 1 / np.log2(3)
    assert two["ndcg@10"] == pytest.approx((1 / np.log2(3) + 1 / np.log2(5)) / ideal)
    assert query_metrics(["z"] * 20, {"a"})["mrr@10"] == 0
    agg = retrieval_metrics([["a"], ["b"]], [{"a"}, {"a"}])
    assert agg["recall@1"] == 50.0 and agg["queries"] == 2
    with pytest.raises(ValueError):
        query_metrics(["a"], set())


# ---------------------------------------------------------------------------- saved folder, Dense


@pytest.mark.parametrize("pooling", ["cls", "max", "mean"])
def test_saved_folder_loads_in_sentence_transformers_with_dense_and_normalize(tiny_dir, tmp_path, pooling):
    st = pytest.importorskip("sentence_transformers")
    model = SentenceEncoder.from_pretrained(tiny_dir, pooling=pooling, dense_dim=16, normalize=True, seed=1)
    model.save(tmp_path / "m")
    assert read_modules(tmp_path / "m") == ["Transformer", "Pooling", "Dense", "Normalize"]
    texts = ["the cat sits on a red mat", "tell me about dogs", "fox"]
    ours = SentenceEncoder.from_pretrained(tmp_path / "m")
    assert ours.dim == 16 and ours.pooling == pooling and ours.normalize
    got = ours.encode(texts)
    ref = st.SentenceTransformer(str(tmp_path / "m"), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(model.encode(texts), got, atol=1e-6)  # the training view agrees


def test_dense_loading_refuses_what_it_cannot_trust(tiny_dir, tmp_path):
    model = SentenceEncoder.from_pretrained(tiny_dir, dense_dim=8)
    model.save(tmp_path / "m")
    modules = json.loads((tmp_path / "m" / "modules.json").read_text())
    modules[2]["path"] = "../elsewhere"
    (tmp_path / "m" / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UserError, match="outside|leaves the folder"):
        SentenceEncoder.from_pretrained(tmp_path / "m")
    modules[2]["path"] = "2_Dense"
    (tmp_path / "m" / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "m" / "2_Dense" / "model.safetensors").rename(
        tmp_path / "m" / "2_Dense" / "pytorch_model.bin"
    )
    with pytest.raises(UserError, match="does not unpickle"):
        SentenceEncoder.from_pretrained(tmp_path / "m")
    with pytest.raises(UserError, match="not supported"):
        Dense(4, 4, activation="os.system")


# ------------------------------------------------------------------------------------------ training


def test_one_module_trains_and_encodes_and_keeps_its_training_flag(tiny_dir):
    """forward (training) and encode (inference) give the same vectors; encode runs in eval mode (no dropout)
    and hands the training flag back, so a model evaluated between steps goes on training."""
    texts = ["the cat sits on a red mat", "tell me about dogs", "fox"]
    model = SentenceEncoder.from_pretrained(tiny_dir, dense_dim=8, normalize=True)
    assert not model.training  # built for inference
    model.train()
    first, again = model.encode(texts), model.encode(texts)
    assert model.training and model.model.training and model.dense[0].training
    np.testing.assert_array_equal(first, again)  # dropout was off while encoding
    batch = model.tokenize_batch(texts)
    with torch.no_grad():
        vectors = model.eval()(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    np.testing.assert_allclose(vectors.numpy(), first, atol=1e-6)
    with pytest.raises(UserError, match="unknown pooling 'avg'"):  # one line, as the CLI shows it
        SentenceEncoder.from_pretrained(tiny_dir, pooling="avg")


@pytest.mark.parametrize("kernels_on", [True, False])
def test_one_pass_over_queries_and_passages_gives_each_batch_its_own_vectors(tiny_dir, kernels_on):
    pairs, _ = synthetic(1, per_topic=1)
    model = SentenceEncoder.from_pretrained(tiny_dir).eval()
    queries = model.tokenize_batch([p.query for p in pairs[:5]])  # short: padded to the passages' length
    passages = model.tokenize_batch(
        [p.positive + " and the red fox" * (i % 3) for i, p in enumerate(pairs[:7])]
    )
    assert queries["input_ids"].shape[1] < passages["input_ids"].shape[1]
    with torch.no_grad(), contextlib.nullcontext() if kernels_on else kernels.reference_ops():
        q, p = embed_together(model, [dict(queries), dict(passages)])
        alone = [model(e["input_ids"], e["attention_mask"], e["token_type_ids"]) for e in (queries, passages)]
    assert q.shape == alone[0].shape and p.shape == alone[1].shape
    torch.testing.assert_close(q, alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(p, alone[1], rtol=1e-5, atol=1e-5)


def test_mined_hard_negatives_exclude_the_positive(tiny_dir):
    pairs, corpus = synthetic(0, per_topic=2)
    model = SentenceEncoder.from_pretrained(tiny_dir)
    mined = mine_hard_negatives(model, pairs, corpus + [pairs[0].positive], 3)
    assert all(len(m.negatives) == 3 and m.positive not in m.negatives for m in mined)
    assert all(set(m.negatives) <= set(corpus) for m in mined)


def _recall_at_1(encoder, pairs: list[Pair]) -> float:
    ids = list(range(len(pairs)))
    out = evaluate_retrieval(
        encoder, [p.query for p in pairs], [{json.dumps(i)} for i in ids], ids, [p.positive for p in pairs]
    )
    return out["bi_encoder"]["recall@1"]


@pytest.mark.parametrize("hard,symmetric", [(0, False), (1, True)])
def test_train_embed_improves_held_out_retrieval(tiny_dir, tmp_path, hard, symmetric):
    torch.manual_seed(0)
    train, _ = synthetic(1)
    held_out = [p for p in synthetic(2, per_topic=1)[0]]
    model = SentenceEncoder.from_pretrained(tiny_dir, normalize=True)
    before = _recall_at_1(model, held_out)
    s = EmbedSettings(epochs=6, batch_size=16, lr=1e-3, hard_negatives=hard, symmetric=symmetric, log_every=5)
    summary = train_embed(model, train, tmp_path / "run", s, progress=False)
    trained = SentenceEncoder.from_pretrained(tmp_path / "run" / "model")
    after = _recall_at_1(trained, held_out)
    assert after >= 80.0 and after > before + 30.0, (before, after)
    assert summary["steps"] == 6 * len(train) // 16 and (tmp_path / "run" / "train_log.json").is_file()
    assert (tmp_path / "run" / "curves.png").is_file()  # drawn by default
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: sentence-similarity" in card and "loss mnrl" in card


def test_train_embed_follows_sentence_transformers_trainer_step_for_step(tiny_dir, tmp_path):
    """The same batches in the same order, dropout off, the same optimiser settings: train-embed and
    sentence-transformers' own trainer take the same steps (warm-up from rate 0 with transformers' rounding,
    clipping, AdamW's decay groups) and end at the same weights; any quality gap between them is the data's
    order and dropout, not the trainer."""
    st = pytest.importorskip("sentence_transformers")
    datasets = pytest.importorskip("datasets")
    from torch.utils.data import BatchSampler, SequentialSampler

    from bertkit.train.batches import Batches

    start = tmp_path / "start"
    SentenceEncoder.from_pretrained(tiny_dir, normalize=True).save(start)
    config = json.loads((start / "config.json").read_text())
    (start / "config.json").write_text(
        json.dumps({**config, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    )
    pairs, _ = synthetic(1)
    batch, steps, seed = 16, 8, 3
    stream = iter(Batches(pairs, batch, lambda items: items, seed=seed))
    ordered = [p for _ in range(steps) for p in next(stream)]  # the order train-embed draws for this seed
    s = EmbedSettings(
        epochs=2, batch_size=batch, lr=1e-3, warmup_ratio=0.25, weight_decay=0.01, seed=seed, log_every=1
    )
    train_embed(
        SentenceEncoder.from_pretrained(start), pairs, tmp_path / "ours", s, progress=False, plot=False
    )

    class InOrder(st.SentenceTransformerTrainer):
        def get_batch_sampler(self, dataset, batch_size, drop_last, *args, **kwargs):
            return BatchSampler(SequentialSampler(range(len(dataset))), batch_size, drop_last)

    ref = st.SentenceTransformer(str(start), device="cpu")
    args = st.SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "st"), num_train_epochs=1, per_device_train_batch_size=batch,
        learning_rate=1e-3, warmup_ratio=0.25, weight_decay=0.01, adam_epsilon=1e-6, max_grad_norm=1.0,
        optim="adamw_torch", seed=seed, report_to=[], save_strategy="no", logging_steps=1,
        dataloader_drop_last=True, use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    data = datasets.Dataset.from_dict(
        {"anchor": [p.query for p in ordered], "positive": [p.positive for p in ordered]}
    )
    trainer = InOrder(
        model=ref, args=args, train_dataset=data, loss=_st_loss_class("MultipleNegativesRankingLoss")(ref)
    )
    trainer.train()
    theirs_loss = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    ours_loss = [
        json.loads(line)["loss"] for line in (tmp_path / "ours" / "metrics.jsonl").read_text().splitlines()
    ]
    np.testing.assert_allclose(ours_loss, theirs_loss, atol=2e-4)  # every step, not only the end
    ours_w = SentenceEncoder.from_pretrained(tmp_path / "ours" / "model").model.state_dict()
    before = BertModel.from_pretrained(start).state_dict()
    theirs_w = {k.split("model.", 1)[-1]: v for k, v in ref.state_dict().items()}
    moved = max(float((ours_w[k] - before[k]).abs().max()) for k in before)
    assert moved > 1e-3  # the runs trained: equal weights below are not two untouched copies
    for k in before:
        if k.endswith("key.bias"):  # softmax ignores it: its gradient is rounding noise, amplified by Adam
            continue
        torch.testing.assert_close(ours_w[k], theirs_w[k], atol=5e-5, rtol=1e-4, msg=k)


def test_train_embed_auto_precision_measures_the_nested_batch(tiny_dir, tmp_path, monkeypatch):
    """``precision="auto"`` on a bi-encoder batch ({"q": {...}, "p": {...}}): measured once (keyed by both
    sides' shapes), resolved to fp32 or bf16 in the summary, and the run still learns."""
    from bertkit import tuning
    from bertkit.train import precision as P

    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BERTKIT_PRECISION", raising=False)
    monkeypatch.setattr(P, "_cpu_has_bf16", lambda: True)  # measured even on a CPU without native bf16
    torch.manual_seed(0)
    train, _ = synthetic(1)
    model = SentenceEncoder.from_pretrained(tiny_dir, normalize=True)
    s = EmbedSettings(epochs=1, batch_size=16, lr=1e-3, precision="auto")
    summary = train_embed(model, train, tmp_path / "run", s, progress=False, plot=False)
    assert not (
        tmp_path / "run" / "curves.png"
    ).exists()  # plot=False: no PNG (the bench times the loop alone)
    (key,) = [k for k in tuning.cached_choices() if k.startswith("precision:")]
    assert "q.input_ids" in key and "p.attention_mask" in key
    assert (
        summary["precision"] in ("fp32", "bf16")
        and summary["precision"] == tuning.cached_choices()[key]["choice"]
    )
    assert math.isfinite(summary["final_loss"])


@pytest.mark.parametrize("loss", ["cosent", "cosine"])
def test_train_embed_scored_pairs_raise_correlation(tiny_dir, tmp_path, loss):
    from bertkit.retrieval.sts import evaluate_sts

    rng = random.Random(3)
    group = {t: i % 4 for i, t in enumerate(TOPICS)}  # a hidden grouping the random model cannot know
    rows = []
    for _ in range(96):
        a, b = rng.sample(TOPICS, 2)
        score = 5.0 if group[a] == group[b] else float(rng.choice([0, 1]))  # 0-5 like STS-B
        rows.append(Pair(f"the {a} is {rng.choice(FILLER)}", f"a {b} {rng.choice(FILLER)}", score=score))
    gold = [(p.query, p.positive, p.score) for p in rows]
    model = SentenceEncoder.from_pretrained(tiny_dir)
    before = evaluate_sts(model, gold)
    settings = EmbedSettings(loss=loss, epochs=8, batch_size=16, lr=1e-3)
    train_embed(model, rows, tmp_path / "c", settings, progress=False)
    after = evaluate_sts(model, gold)
    assert after["spearman"] > before["spearman"] + 20, (before, after)


def test_build_triples_sampled_negatives_never_the_positive():
    pairs, corpus = synthetic(4)
    s = RerankSettings(negatives=2)
    triples = build_triples(pairs, corpus, s, random.Random(0))
    assert len(triples) == 3 * len(pairs)
    for i, p in enumerate(pairs):
        assert triples[3 * i] == (p.query, p.positive, 1.0)
        assert all(
            t[1] != p.positive and t[1] in corpus and t[2] == 0.0 for t in triples[3 * i + 1 : 3 * i + 3]
        )
    labelled = [Pair("q", "d", score=1.0), Pair("q", "e", score=0.0)]
    assert build_triples(labelled, [], s, random.Random(0)) == [("q", "d", 1.0), ("q", "e", 0.0)]
    with pytest.raises(UserError, match="hard-negatives-model"):
        build_triples(pairs, corpus, RerankSettings(hard_negatives=1), random.Random(0))


def test_train_rerank_learns_and_loads_in_both_cross_encoders(tiny_dir, tmp_path):
    """A tiny random BERT learns (in seconds) which passages are on a topic at all; that a cross-encoder
    learns query-passage matching is shown on SQuAD (experiments/retrieval/squad.sh), not here."""
    torch.manual_seed(0)
    rng = random.Random(0)
    pairs, _ = synthetic(4)
    triples = []
    for p in pairs:
        triples.append((p.query, p.positive, 1.0))
        triples.append((p.query, " ".join(rng.sample(FILLER, 7)), 0.0))
    s = RerankSettings(epochs=10, batch_size=16, lr=2e-3, max_length=32, warmup_ratio=0.0)
    summary = train_rerank(tiny_dir, triples, tmp_path / "r", s, progress=False)
    assert summary["positives"] == len(pairs) and summary["final_loss"] < 0.3
    ce = CrossEncoder.from_pretrained(tmp_path / "r" / "model")
    held_out, _ = synthetic(5, per_topic=1)
    right = ce.predict([(p.query, p.positive) for p in held_out])
    wrong = ce.predict([(p.query, " ".join(rng.sample(FILLER, 7))) for p in held_out])
    assert float(np.mean(right > wrong)) >= 0.9
    # re-ranking inside the evaluation: the first 4 queries only, compared on the same 4
    ids = list(range(len(held_out)))
    ev = evaluate_retrieval(
        SentenceEncoder.from_pretrained(tiny_dir),
        [p.query for p in held_out],
        [{json.dumps(i)} for i in ids],
        ids,
        [p.positive for p in held_out],
        reranker=ce,
        rerank_top=5,
        rerank_queries=4,
    )
    assert ev["reranked"]["queries"] == 4 and ev["bi_encoder_reranked_queries"]["queries"] == 4
    assert ev["bi_encoder"]["queries"] == len(held_out)
    st = pytest.importorskip("sentence_transformers")
    ref = st.CrossEncoder(str(tmp_path / "r" / "model"), device="cpu", activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(
        ref.predict([(p.query, p.positive) for p in held_out[:4]]), right[:4], atol=1e-4
    )


# ------------------------------------------------------------------------------------------- CLI


def test_cli_train_embed_evaluate_and_errors(tiny_dir, tmp_path, capsys):
    pairs, corpus = synthetic(6, per_topic=2)
    with open(tmp_path / "train.jsonl", "w") as f:
        for p in pairs:
            f.write(json.dumps({"query": p.query, "positive": p.positive}) + "\n")
    with open(tmp_path / "corpus.jsonl", "w") as f:
        for i, d in enumerate(corpus):
            f.write(json.dumps({"id": i, "text": d}) + "\n")
    with open(tmp_path / "queries.jsonl", "w") as f:
        for i, p in enumerate(pairs[:8]):
            f.write(json.dumps({"id": f"q{i}", "text": p.query, "relevant": [i]}) + "\n")
    base = ["train-embed", "--train", str(tmp_path / "train.jsonl"), "--model", str(tiny_dir)]
    assert (
        cli_main(
            [
                *base,
                "--out",
                str(tmp_path / "o"),
                "--batch-size",
                "8",
                "--hard-negatives",
                "1",
                "--corpus",
                str(tmp_path / "corpus.jsonl"),
                "--pooling",
                "max",
                "--dense-dim",
                "12",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == len(pairs) // 8 and out["settings"]["hard_negatives"] == 1
    assert read_modules(tmp_path / "o" / "model") == ["Transformer", "Pooling", "Dense"]
    assert (
        cli_main(
            [
                "evaluate",
                "retrieval",
                "--model",
                str(tmp_path / "o"),
                "--queries",
                str(tmp_path / "queries.jsonl"),
                "--corpus",
                str(tmp_path / "corpus.jsonl"),
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert res["bi_encoder"]["queries"] == 8 and set(res["bi_encoder"]) >= {"recall@10", "mrr@10", "ndcg@10"}
    # errors: one line, exit 2
    assert cli_main([*base, "--out", str(tmp_path / "o")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli_main([*base, "--out", str(tmp_path / "x"), "--loss", "cosine"]) == 2
    assert "scored pairs" in capsys.readouterr().err
    (tmp_path / "mixed.jsonl").write_text(
        '{"query": "a", "positive": "b"}\n{"sentence1": "a", "sentence2": "b", "score": 1}\n'
    )
    with pytest.raises(UserError, match="line 2"):
        read_pairs(tmp_path / "mixed.jsonl")
    (tmp_path / "badq.jsonl").write_text('{"id": 1, "text": "x"}\n')
    assert (
        cli_main(
            [
                "evaluate",
                "retrieval",
                "--model",
                str(tmp_path / "o"),
                "--queries",
                str(tmp_path / "badq.jsonl"),
                "--corpus",
                str(tmp_path / "corpus.jsonl"),
            ]
        )
        == 2
    )
    assert "relevant" in capsys.readouterr().err


def test_folder_saved_by_sentence_transformers_itself_loads(tiny_dir, tmp_path):
    """sentence-transformers >= 6 writes Pooling as {"pooling_mode": ...} and keeps the length limit in the
    tokenizer's config, not sentence_bert_config.json: bertkit reads its folders as it does, truncation
    included (read as 512, the long text below would be embedded whole)."""
    st = pytest.importorskip("sentence_transformers")
    SentenceEncoder.from_pretrained(tiny_dir, pooling="max", dense_dim=8, max_seq_length=6).save(
        tmp_path / "m"
    )
    model = st.SentenceTransformer(str(tmp_path / "m"), device="cpu")
    model.save(str(tmp_path / "resaved"))
    texts = ["the cat sits", "a red fox", "the cat sits on the mat and a red fox runs past the cat again"]
    ours = SentenceEncoder.from_pretrained(tmp_path / "resaved")
    assert ours.pooling == "max" and ours.dim == 8
    assert ours.max_seq_length == model.max_seq_length == 6
    assert SentenceEncoder.from_pretrained(tmp_path / "resaved", max_seq_length=12).max_seq_length == 12
    np.testing.assert_allclose(ours.encode(texts), model.encode(texts, convert_to_numpy=True), atol=1e-5)


@pytest.mark.parametrize("command", ["train-embed", "train-rerank", "distill"])
def test_training_commands_pass_every_flag_to_their_settings(command, tmp_path):
    """Each command's settings come from its flags by name (AdamWSettings.from_args): every flag given here
    reaches the settings, and what no flag names keeps its default."""
    from bertkit.cli import build_parser
    from bertkit.distill import DistillSettings

    (tmp_path / "f.jsonl").write_text("{}\n")
    common = {"epochs": 2.5, "batch_size": 8, "lr": 1e-4, "seed": 7, "precision": "bf16"}
    given = {
        "train-embed": (EmbedSettings, {**common, "loss": "cosent", "scale": 5.0, "hard_negatives": 2}),
        "train-rerank": (RerankSettings, {**common, "negatives": 5, "hard_negatives": 1, "max_length": 64}),
        "distill": (DistillSettings, {**common, "temperature": 3.0, "alpha": 0.25, "max_seq_length": 32}),
    }
    cls, values = given[command]
    if command == "distill":
        argv = [command, "--teacher", str(tmp_path), "--student", "mini", "--task", "embed"]
    else:
        argv = [
            command,
            "--train",
            str(tmp_path / "f.jsonl"),
            "--model",
            str(tmp_path),
            "--warmup-ratio",
            "0.3",
        ]
        values = {**values, "warmup_ratio": 0.3}
    if command == "train-embed":
        argv, values = [*argv, "--symmetric"], {**values, "symmetric": True}
    argv += ["--out", str(tmp_path / "out")]
    for name, value in values.items():
        if not isinstance(value, bool):
            argv += [f"--{name.replace('_', '-')}", str(value)]
    settings = cls.from_args(build_parser().parse_args(argv))
    assert {k: getattr(settings, k) for k in values} == values
    assert settings.weight_decay == 0.01 and settings.log_every == 10  # no flag names them


@pytest.mark.parametrize("command", ["train-embed", "train-rerank", "distill"])
def test_training_commands_offer_precision_auto(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main([command, "--help"])
    assert exit_.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--precision {fp32,bf16,fp16,auto}" in help_text
