"""Routes of the server against the task code they must agree with, and the batcher.

- ``/qa`` gives, question by question, the answers ``finetune squad``'s evaluation gives for the same model
  (same windows, same post-processing), hence the same EM/F1; character offsets point at the answer.
- ``/ner`` gives the word tags ``finetune ner``'s evaluation gives, and the entities conlleval sees in them.
- Cross-request batching returns what each request alone returns, and does not starve a small request.
"""

from __future__ import annotations

import base64
import json
import threading
import time

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from fastapi.testclient import TestClient  # noqa: E402
from serving_utils import tiny_dir  # noqa: E402

from bertkit.cli import main as cli_main  # noqa: E402
from bertkit.heads.finetune import (  # noqa: E402
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.model import BertModel  # noqa: E402
from bertkit.sentence.encoder import SentenceEncoder  # noqa: E402
from bertkit.serving import InferenceService, create_app  # noqa: E402
from bertkit.serving.routes.predict import predict  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402

CONLL_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def _minilm_head(cls, minilm_dir, out, **overrides):
    """MiniLM's vocabulary and first two layers under a fresh head: real tokens, a third of the cost (the
    two code paths compared only need the same model)."""
    torch.manual_seed(0)  # the new head's initialisation
    cls.from_pretrained(minilm_dir, num_hidden_layers=2, **overrides).save_pretrained(out)
    Tokenizer.from_pretrained(minilm_dir).save_pretrained(out)
    return out


def _squad_subset(shared_data, paragraphs=2):
    data = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    article = data["data"][-1]
    return {
        "version": data.get("version", "1.1"),
        "data": [{**article, "paragraphs": article["paragraphs"][:paragraphs]}],
    }


def test_qa_equals_squad_evaluation(tmp_path, shared_data, minilm_dir):
    from bertkit.tasks import squad as S
    from bertkit.tasks import squad_postprocess as P
    from bertkit.tasks.squad_metrics import evaluate
    from bertkit.tasks.squad_train import predict_logits

    model_dir = _minilm_head(BertForQuestionAnswering, minilm_dir, tmp_path / "qa")
    dev = _squad_subset(shared_data)
    # finetune squad's evaluation path
    model = BertForQuestionAnswering.from_pretrained(model_dir).eval()
    tok = Tokenizer.from_pretrained(model_dir)
    examples, _ = S.read_squad_examples(dev, is_training=False)
    feats = S.convert_examples_to_features(examples, tok, 384, 128, 64)
    with torch.no_grad():
        results = predict_logits(model, feats, progress=False)
    want = P.compute_predictions(examples, feats, results, lowercase=True).predictions

    client = TestClient(create_app(model_dir))
    questions = [
        (qa["id"], qa["question"], p["context"]) for p in dev["data"][0]["paragraphs"] for qa in p["qas"]
    ]
    assert len(questions) >= 10
    got = {}
    for start in range(0, len(questions), 8):  # the token budget is bounded from characters: 8 at a time
        chunk = questions[start : start + 8]
        r = client.post("/qa", json={"inputs": [{"question": q, "context": c} for _, q, c in chunk]})
        assert r.status_code == 200, r.text
        for (qid, _, context), ans in zip(chunk, r.json()):
            got[qid] = ans["answer"]
            if ans["answer"] and ans["start"] is not None:
                assert context[ans["start"] : ans["end"]] == ans["answer"]
            assert 0 <= ans["score"] <= 1
    assert got == want
    located = sum(1 for qid, _, _ in questions if got[qid])
    assert located > 0
    assert evaluate(dev, got, version="1.1") == evaluate(dev, want, version="1.1")
    # `bertkit predict` on the SQuAD file: the same answers and offsets as the route
    (tmp_path / "dev.json").write_text(json.dumps(dev), encoding="utf-8")
    assert (
        cli_main(
            [
                "predict",
                str(model_dir),
                "--input",
                str(tmp_path / "dev.json"),
                "--out",
                str(tmp_path / "qa.jsonl"),
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in (tmp_path / "qa.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["id"]: r["answer"] for r in rows} == want
    assert all(r["start"] is None or r["start"] >= 0 for r in rows)
    # the single-question shape, and a context longer than one window (several windows, one answer)
    qid, q, c = questions[0]
    one = client.post("/qa", json={"question": q, "context": c}).json()
    assert one["answer"] == want[qid] and "id" not in one
    long_context = " ".join(p["context"] for p in dev["data"][0]["paragraphs"])
    r = client.post("/qa", json={"question": q, "context": long_context, "doc_stride": 64})
    assert r.status_code == 200 and r.json()["answer"] in long_context
    # v2: the null answer is offered
    v2 = client.post("/qa", json={"question": q, "context": c, "handle_impossible_answer": True}).json()
    assert "null_score_diff" in v2 and v2["no_answer"] == (v2["answer"] == "")


def test_ner_equals_conll_evaluation(tmp_path, shared_data, minilm_dir):
    from bertkit.tasks.encoding import encode_tokens
    from bertkit.tasks.evaluation import predict_features
    from bertkit.tasks.metrics import conll_entities
    from bertkit.tasks.ner import read_conll

    id2label = dict(enumerate(CONLL_LABELS))
    model_dir = _minilm_head(
        BertForTokenClassification, minilm_dir, tmp_path / "ner", num_labels=9, id2label=id2label
    )
    sentences = [s for s in read_conll(shared_data / "conll2003" / "valid.txt")[:60] if s.words]
    sentences = [s for s in sentences if len(s.words) < 12][:10] + [
        s for s in sentences if len(s.words) > 30
    ][:4]
    model = BertForTokenClassification.from_pretrained(model_dir).eval()
    tok = Tokenizer.from_pretrained(model_dir)
    # finetune ner's evaluation path (max length 32: long sentences span several windows)
    svc = InferenceService(model_dir, max_length=32)
    feats = encode_tokens(tok, sentences, {lab: i for i, lab in enumerate(CONLL_LABELS)}, 32)
    raw = predict_features(model, feats, "token")
    want = [["O"] * len(s.words) for s in sentences]
    for f, path in zip(feats, raw):
        for j, lab in enumerate(path[: f.n_words]):
            want[f.example][f.word_start + j] = CONLL_LABELS[lab]
    assert any(len(s.words) > 30 for s in sentences)  # windows are exercised

    client = TestClient(create_app(svc))
    n_entities = 0
    for s, tags in zip(sentences, want):
        r = client.post("/ner", json={"words": s.words})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tags"] == tags
        text = " ".join(s.words)
        starts = np.cumsum([0] + [len(w) + 1 for w in s.words])
        spans = [
            (int(starts[a]), int(starts[b - 1] + len(s.words[b - 1]))) for _, a, b in conll_entities(tags)
        ]
        assert [(e["start"], e["end"]) for e in body["entities"]] == spans
        assert all(text[e["start"] : e["end"]] == e["word"] for e in body["entities"])
        n_entities += len(spans)
    assert n_entities > 0
    # `bertkit predict` on a CoNLL file: the same tags and entities as the route
    conll = tmp_path / "in.conll"
    conll.write_text(
        "\n\n".join("\n".join(f"{w} O" for w in s.words) for s in sentences) + "\n", encoding="utf-8"
    )
    args = [
        "predict",
        str(model_dir),
        "--input",
        str(conll),
        "--out",
        str(tmp_path / "ner.jsonl"),
        "--max-seq-length",
        "32",
    ]
    assert cli_main(args) == 0
    rows = [json.loads(x) for x in (tmp_path / "ner.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["tags"] for r in rows] == want
    assert rows[0]["entities"] == client.post("/ner", json={"words": sentences[0].words}).json()["entities"]

    # raw text: BERT's words, offsets into the original characters; every aggregation answers
    text = "Peter Blackburn  visited   the EU's office in Brussels, Belgium."
    for aggregation in ("first", "max", "simple"):
        r = client.post("/ner", json={"text": text, "aggregation": aggregation})
        assert r.status_code == 200, r.text
        for e in r.json()["entities"]:
            assert text[e["start"] : e["end"]] == e["word"] and e["entity_group"] in {
                "PER",
                "ORG",
                "LOC",
                "MISC",
            }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("routes")
    return {
        "enc": tiny_dir(BertModel, root / "enc"),
        "cls": tiny_dir(BertForSequenceClassification, root / "cls", id2label={0: "neg", 1: "pos"}),
        "rank": tiny_dir(BertForSequenceClassification, root / "rank", num_labels=1),
    }


TEXTS = ["the cat sat on the mat", "a dog", "the movie was very very good", "bad", "the cat " * 12]


def test_tei_and_openai_shapes(tiny):
    client = TestClient(create_app(tiny["enc"]))
    ref = np.array(client.post("/embed", json={"texts": TEXTS}).json()["embeddings"])
    unit = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    # TEI: a bare list, normalised by default; a single string is a batch of one
    tei = np.array(client.post("/embed", json={"inputs": TEXTS}).json())
    np.testing.assert_allclose(tei, unit, atol=1e-5)
    one = client.post("/embed", json={"inputs": TEXTS[0], "normalize": False}).json()
    np.testing.assert_allclose(np.array(one[0]), ref[0], atol=1e-5)
    dims = np.array(client.post("/embed", json={"inputs": TEXTS, "dimensions": 16}).json())
    np.testing.assert_allclose(
        dims, ref[:, :16] / np.linalg.norm(ref[:, :16], axis=1, keepdims=True), atol=1e-5
    )
    # OpenAI
    body = client.post("/v1/embeddings", json={"input": TEXTS, "model": "m"}).json()
    assert body["object"] == "list" and body["model"] == "m" and body["usage"]["prompt_tokens"] > 0
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    np.testing.assert_allclose(np.array([d["embedding"] for d in body["data"]]), unit, atol=1e-5)
    b64 = client.post("/v1/embeddings", json={"input": "a dog", "encoding_format": "base64"}).json()
    vec = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vec, unit[1], atol=1e-5)
    # bi-encoder rerank: cosine, best first
    r = client.post("/rerank", json={"query": TEXTS[0], "texts": TEXTS[1:], "return_text": True}).json()
    cos = unit[1:] @ unit[0]
    assert [x["index"] for x in r] == list(np.argsort(-cos, kind="stable"))
    assert r[0]["text"] == TEXTS[1:][r[0]["index"]]
    np.testing.assert_allclose([x["score"] for x in r], np.sort(cos)[::-1], atol=1e-5)
    info = client.get("/info").json()
    assert info["rerank"] == "cosine" and "/qa" not in info["endpoints"]
    assert client.post("/qa", json={"question": "a", "context": "b"}).json()["error_type"] == "unsupported"


def test_cross_encoder_rerank_and_tei_predict(tiny):
    ce = TestClient(create_app(tiny["rank"]))
    model = BertForSequenceClassification.from_pretrained(tiny["rank"]).eval()
    tok = Tokenizer.from_pretrained(tiny["rank"])
    with torch.no_grad():
        logits = model(**tok(["the cat"] * 3, ["a dog", "the mat", "bad"])).logits[:, 0].numpy()
    r = ce.post(
        "/rerank", json={"query": "the cat", "texts": ["a dog", "the mat", "bad"], "raw_scores": True}
    ).json()
    assert [x["index"] for x in r] == list(np.argsort(-logits, kind="stable"))
    np.testing.assert_allclose(sorted(x["score"] for x in r), sorted(logits), atol=1e-5)
    sig = ce.post("/rerank", json={"query": "the cat", "texts": ["a dog"]}).json()[0]["score"]
    assert sig == pytest.approx(1 / (1 + np.exp(-logits[0])), abs=1e-5)
    # a one-output (regression) head: TEI's shape gives the raw score, as bertkit's own shape does
    tei = ce.post("/predict", json={"inputs": [["the cat", "a dog"], ["the cat", "the mat"]]}).json()
    own = ce.post("/predict", json={"texts": ["the cat"] * 2, "pairs": ["a dog", "the mat"]}).json()
    np.testing.assert_allclose([t[0]["score"] for t in tei], logits[:2], atol=1e-5)
    assert [t[0]["score"] for t in tei] == [p["score"] for p in own["predictions"]]

    cls = TestClient(create_app(tiny["cls"]))
    pair = cls.post("/predict", json={"inputs": ["the cat", "a dog"]}).json()  # TEI: one pair
    mine = cls.post("/predict", json={"texts": ["the cat"], "pairs": ["a dog"]}).json()["predictions"][0]
    assert [p["label"] for p in pair] == sorted(
        mine["probabilities"], key=lambda k: -mine["probabilities"][k]
    )
    assert pair[0]["score"] == pytest.approx(mine["score"], abs=1e-6)
    batch = cls.post("/predict", json={"inputs": ["the cat", "a dog", "bad"]}).json()
    assert len(batch) == 3 and all(len(x) == 2 for x in batch)
    raw = cls.post("/predict", json={"inputs": "the cat", "raw_scores": True}).json()
    assert sum(x["score"] for x in raw) != pytest.approx(1.0)


def test_long_text_windows(tiny):
    svc = InferenceService(tiny["enc"], window_stride=10)  # max length 32: windows of 30 pieces, 10 apart
    text = " ".join(["the cat sat on the mat"] * 12)  # 72 pieces -> windows at 0, 10, .., 50
    ids, _, owner = svc.encode([text], long_text="windows", for_embedding=True)
    assert len(ids) == 6 and owner == [0] * 6 and all(len(x) <= 32 for x in ids)
    vec, _ = svc.embed([text], long_text="windows")
    want = np.mean([svc.embed([svc.tokenizer.decode(x[1:-1])])[0][0] for x in ids], axis=0)
    np.testing.assert_allclose(vec[0], want, atol=1e-4)
    assert not np.allclose(vec[0], svc.embed([text])[0][0], atol=1e-3)  # truncation differs


def test_embed_long_text_windows_cli(tiny, tmp_path):
    text = " ".join(["the cat sat on the mat"] * 12)
    (tmp_path / "in.txt").write_text(f"{text}\na dog\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    args = [
        "embed",
        str(tiny["enc"]),
        "--input",
        str(tmp_path / "in.txt"),
        "--out",
        str(out),
        "--long-text",
        "windows",
    ]
    assert cli_main(args) == 0
    want, _ = InferenceService(tiny["enc"]).embed([text, "a dog"], long_text="windows")
    np.testing.assert_allclose(np.load(out), want, atol=1e-5)


def test_predict_long_text_windows_cli(tiny, tmp_path):
    text = " ".join(["the movie was very good"] * 15)
    (tmp_path / "in.txt").write_text(f"{text}\nbad\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert (
        cli_main(
            [
                "predict",
                str(tiny["cls"]),
                "--input",
                str(tmp_path / "in.txt"),
                "--out",
                str(out),
                "--long-text",
                "windows",
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    want = predict(InferenceService(tiny["cls"], max_length=32), [text, "bad"], long_text="windows")
    assert [r["label"] for r in rows] == [w["label"] for w in want]
    assert rows[0]["score"] == pytest.approx(want[0]["score"], abs=1e-6)
    truncated = predict(InferenceService(tiny["cls"], max_length=32), [text])[0]
    assert truncated["score"] != pytest.approx(want[0]["score"], abs=1e-6)


def _concurrent(fn, args_list):
    out = [None] * len(args_list)
    errors = []

    def go(i, a):
        try:
            out[i] = fn(*a)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return out


def test_batching_same_outputs_as_unbatched(tiny):
    plain = InferenceService(tiny["cls"], batching={"enabled": False})
    merged = InferenceService(
        tiny["cls"], batching={"max_wait_ms": 50, "max_batch_tokens": 4096, "workers": 2}
    )
    sizes = []
    merged.batcher.on_batch = lambda task, n, tokens: sizes.append(n)
    requests = [([t], None) for t in TEXTS] * 3 + [(TEXTS, None), (TEXTS[:2], TEXTS[2:4])]
    want = [predict(plain, t, p) for t, p in requests]
    got = _concurrent(lambda t, p: predict(merged, t, p), requests)
    for w, g in zip(want, got):
        for a, b in zip(w, g):
            assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-5)
    assert max(sizes) > 1 and len(sizes) < len(requests)  # requests were merged
    emb_want = [plain.embed([t])[0] for t in TEXTS]
    emb_got = _concurrent(lambda t: merged.embed([t])[0], [(t,) for t in TEXTS])
    np.testing.assert_allclose(np.concatenate(emb_got), np.concatenate(emb_want), atol=1e-5)
    plain.close()
    merged.close()


def test_small_request_not_starved(tiny):
    svc = InferenceService(tiny["enc"], batching={"max_wait_ms": 0, "max_batch_tokens": 64})
    done = {}
    slow_run = svc.batcher.run

    def run(task, ids, types):  # each batch takes a while, so the big request needs many turns
        time.sleep(0.02)
        return slow_run(task, ids, types)

    svc.batcher.run = run

    def big():
        svc.embed(["the cat sat on the mat " * 5] * 40)
        done["big"] = time.monotonic()

    def small():
        deadline = time.monotonic() + 30
        while svc.batcher.queue_depth() < 30 and time.monotonic() < deadline:  # the big one is queued
            time.sleep(0.001)
        svc.embed(["a dog"])
        done["small"] = time.monotonic()
        done["big_done_before_small"] = "big" in done

    _concurrent(lambda f: f(), [(big,), (small,)])
    assert not done["big_done_before_small"] and done["small"] < done["big"]
    svc.close()


def test_int8_close_to_float(tiny):
    plain = InferenceService(tiny["cls"])
    q = InferenceService(tiny["cls"], int8=True)
    assert q.info()["int8"] is True
    a, _ = plain.embed(TEXTS, normalize=True)
    b, _ = q.embed(TEXTS, normalize=True)
    assert float(np.min(np.sum(a * b, axis=1))) > 0.99  # cosine of float vs int8 vectors
    assert not np.allclose(a, b, atol=1e-6)  # it did run the int8 path
    pa = [p["probabilities"]["pos"] for p in predict(plain, TEXTS)]
    pb = [p["probabilities"]["pos"] for p in predict(q, TEXTS)]
    np.testing.assert_allclose(pa, pb, atol=0.02)
    plain.close()
    q.close()


def test_embed_applies_the_folders_dense_module(tmp_path):
    """A sentence-transformers folder with a Dense projection: /embed gives what SentenceEncoder.encode gives
    (pooling, then Dense), not the pooled hidden state."""
    from bertkit.sentence.encoder import SentenceEncoder

    base = tiny_dir(BertModel, tmp_path / "enc")
    SentenceEncoder.from_pretrained(base, pooling="mean", dense_dim=8, seed=1).save(tmp_path / "st")
    expected = SentenceEncoder.from_pretrained(tmp_path / "st").encode(TEXTS)
    assert expected.shape == (len(TEXTS), 8)
    client = TestClient(create_app(tmp_path / "st"))
    got = np.array(client.post("/embed", json={"texts": TEXTS}).json()["embeddings"])
    np.testing.assert_allclose(got, expected, atol=1e-5)


def _strict_json(text: str):
    """``json.loads`` that refuses the NaN/Infinity tokens Python's encoder writes (they are not JSON)."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_nan_weights_answer_a_json_error_not_invalid_json(tiny, tmp_path):
    nan_dir = tmp_path / "nan"
    for kind, cls in (("enc", BertModel), ("cls", BertForSequenceClassification)):
        model = cls.from_pretrained(tiny[kind])
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))  # the word embeddings
        model.save_pretrained(nan_dir / kind)
        Tokenizer.from_pretrained(tiny[kind]).save_pretrained(nan_dir / kind)
    enc, cls_client = TestClient(create_app(nan_dir / "enc")), TestClient(create_app(nan_dir / "cls"))
    for client, path, body in (
        (enc, "/embed", {"texts": ["the cat"]}),
        (enc, "/embed", {"inputs": "the cat", "normalize": False}),
        (enc, "/v1/embeddings", {"input": "the cat"}),
        (cls_client, "/predict", {"texts": ["the cat"]}),
        (cls_client, "/predict", {"inputs": "the cat", "raw_scores": True}),
    ):
        r = client.post(path, json=body)
        got = _strict_json(r.text)
        if path.startswith("/v1/"):  # OpenAI's error shape
            got = {"error": got["error"]["message"], "error_type": got["error"]["code"]}
        assert r.status_code == 500 and got["error_type"] == "model_output", (path, body, r.text[:200])
        assert "NaN" in got["error"]


def _st_folder(base, out, max_seq_length=8, **config_st):
    """A sentence-transformers folder (mean pooling, Normalize, ``max_seq_length``) over ``base``'s weights;
    ``config_st`` goes to config_sentence_transformers.json (prompts)."""
    import shutil

    shutil.copytree(base, out)
    st = "sentence_transformers.models."
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": st + "Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "1_Pooling").mkdir()
    hidden = json.loads((out / "config.json").read_text())["hidden_size"]
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True})
    )
    (out / "2_Normalize").mkdir()
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    if config_st:
        (out / "config_sentence_transformers.json").write_text(json.dumps(config_st))
    return out


def test_tei_embed_normalize_truncate_and_direction(tiny, tmp_path):
    """A folder with a Normalize module: ``normalize: false`` gives the raw pooled vector; ``truncate`` cuts
    at (and ``truncate: false`` refuses past) the one limit /info reports; ``Left`` keeps the last tokens."""
    folder = _st_folder(tiny["enc"], tmp_path / "st", max_seq_length=8)
    client = TestClient(create_app(folder))
    info = client.get("/info").json()
    assert info["max_input_length"] == info["max_length"] == 8
    raw = SentenceEncoder.from_pretrained(tiny["enc"], max_seq_length=8).encode(TEXTS)
    # TEXTS run past the folder's 8 tokens: cut on request (TEI refuses them unless --auto-truncate)
    body = {"inputs": TEXTS, "normalize": False, "truncate": True}
    got = np.array(client.post("/embed", json=body).json())
    np.testing.assert_allclose(got, raw, atol=1e-5)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    unit = np.array(client.post("/embed", json={"texts": TEXTS}).json()["embeddings"])  # the folder's own
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5)

    long = "the cat sat on the mat a dog bad movie"  # 10 words: 12 tokens with [CLS]/[SEP]
    short = "the cat sat on the mat"  # 8 tokens: exactly the limit
    r = client.post("/embed", json={"inputs": long, "truncate": False})
    assert r.status_code == 413 and "inputs[0] is 12 tokens" in r.json()["error"] and "8" in r.json()["error"]
    ok = client.post("/embed", json={"inputs": short, "truncate": False})
    assert ok.status_code == 200, ok.text
    right = client.post("/embed", json={"inputs": long, "truncate": True}).json()
    np.testing.assert_allclose(right, client.post("/embed", json={"inputs": short}).json(), atol=1e-6)
    left = client.post(
        "/embed", json={"inputs": long, "truncate": True, "truncation_direction": "Left"}
    ).json()
    tail = client.post("/embed", json={"inputs": "the mat a dog bad movie"}).json()
    np.testing.assert_allclose(left, tail, atol=1e-6)
    assert not np.allclose(left, right, atol=1e-3)
    # unknown fields are refused by name, not ignored
    r = client.post("/embed", json={"inputs": "a dog", "normalise": False})
    assert r.status_code == 422 and "'normalise'" in r.json()["error"]
