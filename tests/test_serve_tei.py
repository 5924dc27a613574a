"""TEI's routes: /tokenize (TEI's shape), /decode, /embed_all, /similarity; response headers (request id,
compute time) and --api-key bearer authentication."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from fastapi.testclient import TestClient  # noqa: E402
from serving_utils import tiny_dir  # noqa: E402

from bertkit.model import BertModel  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402

TEXTS = ["the cat sat on the mat", "a dog", "the movie was very good"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_dir(BertModel, tmp_path_factory.mktemp("tei") / "enc")


@pytest.fixture(scope="module")
def client(model):
    return TestClient(create_app(model))


def test_tokenize_and_decode(client, model):
    tok = Tokenizer.from_pretrained(model)
    text = "The  cat sat"
    got = client.post("/tokenize", json={"inputs": text}).json()
    assert len(got) == 1
    enc = tok.encode(text)
    assert [t["id"] for t in got[0]] == enc.ids
    assert got[0][0] == {
        "id": tok.cls_token_id,
        "text": "[CLS]",
        "special": True,
        "start": None,
        "stop": None,
    }
    words = [t for t in got[0] if not t["special"]]
    assert [text[t["start"] : t["stop"]] for t in words] == ["The", "cat", "sat"]
    assert [t["text"] for t in words] == ["The", "cat", "sat"]
    bare = client.post("/tokenize", json={"inputs": [text, "a dog"], "add_special_tokens": False}).json()
    assert [t["id"] for t in bare[0]] == enc.ids[1:-1] and len(bare) == 2
    # bertkit's own shape is unchanged
    assert client.post("/tokenize", json={"text": text}).json()["ids"] == enc.ids

    assert client.post("/decode", json={"ids": enc.ids}).json() == ["the cat sat"]
    both = client.post("/decode", json={"ids": [enc.ids, enc.ids], "skip_special_tokens": False}).json()
    assert both == [tok.decode(enc.ids, skip_special_tokens=False)] * 2 and "[CLS]" in both[0]


def test_embed_all_and_similarity(client, model):
    bert = BertModel.from_pretrained(model).eval()
    tok = Tokenizer.from_pretrained(model)
    got = client.post("/embed_all", json={"inputs": TEXTS[:2]}).json()
    for text, states in zip(TEXTS[:2], got):
        ids = torch.tensor([tok.encode(text).ids])
        with torch.no_grad():
            want = bert(ids).last_hidden_state[0].numpy()
        np.testing.assert_allclose(np.array(states), want, atol=1e-5)

    ref = np.array(client.post("/embed", json={"inputs": TEXTS}).json())
    scores = client.post(
        "/similarity", json={"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}
    ).json()
    np.testing.assert_allclose(scores, ref[1:] @ ref[0], atol=1e-5)


def test_request_id_and_compute_time_headers(client):
    r = client.post("/embed", json={"inputs": "a dog"})
    assert len(r.headers["x-request-id"]) == 32 and float(r.headers["x-compute-time"]) >= 0
    other = client.post("/embed", json={"inputs": "a dog"}).headers["x-request-id"]
    assert other != r.headers["x-request-id"]
    mine = client.get("/health", headers={"x-request-id": "trace-42"})
    assert mine.headers["x-request-id"] == "trace-42"
    # a client's id that is not a short token is replaced, not echoed
    odd = client.get("/health", headers={"x-request-id": "a" * 200}).headers["x-request-id"]
    assert odd != "a" * 200 and len(odd) == 32
    assert "x-request-id" in client.post("/embed", json={"inputs": []}).headers  # errors too


def test_api_key(model):
    secured = TestClient(create_app(model, api_key="s3cret"))
    body = {"inputs": "a dog"}
    assert secured.post("/embed", json=body, headers={"authorization": "Bearer s3cret"}).status_code == 200
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
        r = secured.post("/embed", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error_type"] == "unauthorized", headers
        assert r.headers["www-authenticate"] == "Bearer"
    r = secured.post("/v1/embeddings", json={"input": "a"})
    assert r.status_code == 401 and "api key" in r.json()["error"]["message"]
    assert secured.get("/health").status_code == 200  # for load balancers' probes
    open_app = TestClient(create_app(model))
    assert open_app.post("/embed", json=body).status_code == 200  # off by default


def test_serve_api_key_from_the_environment(model, tmp_path):
    import os

    from serving_utils import Server

    env = {**os.environ, "BERTKIT_API_KEY": "k3y"}
    server = Server(model, tmp_path, env=env)
    try:
        status, body, headers = server.request("POST", "/embed", {"inputs": "a dog"})
        assert status == 401 and body["error_type"] == "unauthorized" and "x-request-id" in headers
        auth = {"Authorization": "Bearer k3y", "Content-Type": "application/json"}
        status, body, _ = server.request("POST", "/embed", {"inputs": "a dog"}, headers=auth)
        assert status == 200 and len(body) == 1
    finally:
        server.stop()
