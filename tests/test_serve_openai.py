"""``/v1/embeddings`` through the official ``openai`` client: vectors, token-id input (what LangChain
sends), base64, and errors in OpenAI's shape so the client shows the server's message."""

from __future__ import annotations

import base64

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from fastapi.testclient import TestClient  # noqa: E402
from serving_utils import tiny_dir  # noqa: E402

from bertkit.model import BertModel  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402

TEXTS = ["the cat sat on the mat", "a dog", "the movie was very good"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = tiny_dir(BertModel, tmp_path_factory.mktemp("openai") / "enc")
    client = TestClient(create_app(model))
    return model, client


def _unit(client, texts):
    ref = np.array(client.post("/embed", json={"texts": texts}).json()["embeddings"])
    return ref / np.linalg.norm(ref, axis=1, keepdims=True)


def test_openai_client_embeddings(served):
    openai = pytest.importorskip("openai")
    model, http = served
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
    unit = _unit(http, TEXTS)
    # unless told otherwise the client asks for base64 and decodes it itself
    for fmt in (openai.NOT_GIVEN, "float"):
        got = client.embeddings.create(input=TEXTS, model="m", encoding_format=fmt)
        np.testing.assert_allclose([d.embedding for d in got.data], unit, atol=1e-5)
        assert got.model == "m" and got.usage.prompt_tokens > 0
    b64 = client.embeddings.create(input=TEXTS, model="m", encoding_format="base64").data
    decoded = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in b64]
    np.testing.assert_allclose(decoded, unit, atol=1e-5)
    # token ids: one sequence, or a batch of them, run as given (specials included)
    ids = Tokenizer.from_pretrained(model)(TEXTS[:2], padding=False, return_tensors=None)["input_ids"]
    batch = client.embeddings.create(input=ids, model="m")
    np.testing.assert_allclose([d.embedding for d in batch.data], unit[:2], atol=1e-5)
    one = client.embeddings.create(input=ids[1], model="m")
    np.testing.assert_allclose(one.data[0].embedding, unit[1], atol=1e-5)
    assert one.usage.prompt_tokens == len(ids[1])
    # errors: the client's exception carries the server's one-line message
    with pytest.raises(openai.BadRequestError) as e:  # 400, as OpenAI answers a bad request
        client.embeddings.create(input=[[2, 99999, 3]], model="m")
    assert "token id 99999" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(input="a", model="m", extra_body={"temperature": 1})
    assert "'temperature'" in e.value.message


def test_v1_errors_have_openai_shape_and_tei_routes_keep_theirs(served):
    _, http = served
    r = http.post("/v1/embeddings", json={"input": [[]]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and "no token ids" in err["message"]
    assert err["type"] == "invalid_request_error" and err["code"] == "validation"
    r = http.post("/v1/embeddings", json={"input": [list(range(5, 14))] * 2 + [[5] * 40]})
    assert r.status_code == 413 and "input[2] is 40 tokens" in r.json()["error"]["message"]
    r = http.post("/v1/embeddings", content=b"x" * (2 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "--max-body-bytes" in r.json()["error"]["message"]
    r = http.post("/embed", json={"inputs": []})
    assert r.status_code == 422 and set(r.json()) == {"error", "error_type"}
