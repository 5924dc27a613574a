"""``bertkit serve`` options a TEI or OpenAI user reaches for: limits on the command line, a CORS allow-list,
a JSON access log, TEI's ``--auto-truncate``, and OpenAI error bodies that name the offending field."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from fastapi.testclient import TestClient  # noqa: E402
from serving_utils import tiny_dir  # noqa: E402

from bertkit.cli import main as cli_main  # noqa: E402
from bertkit.model import BertModel  # noqa: E402
from bertkit.serving import Limits, create_app  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_dir(BertModel, tmp_path_factory.mktemp("serve-options") / "enc")


@pytest.fixture
def served_with(monkeypatch):
    """Run ``bertkit serve ARGS`` up to the point where it would start uvicorn; return serve()'s arguments."""
    import bertkit.serving

    seen: dict = {}

    def fake_serve(model_dir, **kwargs):
        seen.update(kwargs, model_dir=model_dir)

    monkeypatch.setattr(bertkit.serving, "serve", fake_serve)

    def run(*args: str) -> dict:
        assert cli_main(["serve", *args]) in (0, None)
        return seen

    return run


def test_max_embed_all_values_flag_reaches_the_limit(model, served_with):
    limits = served_with(str(model), "--max-embed-all-values", "100")["limits"]
    assert limits.max_embed_all_values == 100
    client = TestClient(create_app(model, limits=limits))
    r = client.post("/embed_all", json={"inputs": "the cat sat"})  # 5 tokens x 128 values
    assert r.status_code == 413 and "--max-embed-all-values" in r.json()["error"]
    assert "100" in r.json()["error"]
    assert served_with(str(model))["limits"].max_embed_all_values == Limits().max_embed_all_values


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "many"])
def test_max_embed_all_values_must_be_a_positive_integer(model, value, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", str(model), "--max-embed-all-values", value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--max-embed-all-values" in err and "positive integer" in err


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": [[2, 99999, 3]]}, 422, "input"),  # a token id outside the vocabulary
        ({"input": ["a", "b\ud800"]}, 422, "input"),  # a lone surrogate (the library's check)
        ({"input": []}, 422, "input"),
        ({"input": "a", "model": "m\ud800"}, 422, "model"),
        ({"input": "a", "dimensions": 0}, 422, "dimensions"),
        ({"input": [[5, 6]], "dimensions": 4096}, 422, "dimensions"),
        ({"input": "a", "encoding_format": "hex"}, 422, "encoding_format"),
        ({"input": "a", "temperature": 1}, 422, "temperature"),  # pydantic: an unknown field
        ({"input": 3}, 422, "input"),  # pydantic: a wrong type
        ({"model": "m"}, 422, "input"),  # pydantic: a missing field
    ],
)
def test_openai_errors_name_the_field_at_fault(model, body, status, param):
    client = TestClient(create_app(model))
    raw = json.dumps(body).encode()  # ASCII escapes: a lone surrogate travels as JSON allows
    r = client.post("/v1/embeddings", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err


def test_openai_errors_with_no_one_field_have_a_null_param(model):
    client = TestClient(create_app(model))
    r = client.post("/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["param"] is None
    # TEI's routes keep TEI's shape, with no param
    r = client.post("/embed", json={"inputs": []})
    assert r.status_code == 422 and set(r.json()) == {"error", "error_type"}
