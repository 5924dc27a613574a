"""``bertkit serve`` options a TEI or OpenAI user reaches for: limits on the command line, a CORS allow-list,
a JSON access log, TEI's ``--auto-truncate``, and OpenAI error bodies that name the offending field."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from fastapi.testclient import TestClient  # noqa: E402
from serving_utils import Server, tiny_dir  # noqa: E402

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
        ({"input": [[2, 99999, 3]]}, 400, "input"),  # a token id outside the vocabulary
        ({"input": ["a", "b\ud800"]}, 400, "input"),  # a lone surrogate (the library's check)
        ({"input": []}, 400, "input"),
        ({"input": "a", "model": "m\ud800"}, 400, "model"),
        ({"input": "a", "dimensions": 0}, 400, "dimensions"),
        ({"input": [[5, 6]], "dimensions": 4096}, 400, "dimensions"),
        ({"input": "a", "encoding_format": "hex"}, 400, "encoding_format"),
        ({"input": "a", "temperature": 1}, 400, "temperature"),  # pydantic: an unknown field
        ({"input": 3}, 400, "input"),  # pydantic: a wrong type
        ({"model": "m"}, 400, "input"),  # pydantic: a missing field
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
    assert r.status_code == 400 and r.json()["error"]["param"] is None
    # TEI's routes keep TEI's shape, with no param
    r = client.post("/embed", json={"inputs": []})
    assert r.status_code == 422 and set(r.json()) == {"error", "error_type"}


def _preflight(client, origin: str, headers: str = "content-type"):
    return client.options(
        "/embed",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": headers,
        },
    )


def test_cors_allow_list(model):
    client = TestClient(
        create_app(model, api_key="k", cors_origins=["https://app.example", "http://localhost:3000/"])
    )
    for origin in ("https://app.example", "http://localhost:3000"):
        # the preflight carries no key (browsers never send one) and is answered all the same
        r = _preflight(client, origin, "authorization, content-type")
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == origin
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
    r = client.post(
        "/embed",
        json={"inputs": "a dog"},
        headers={"Origin": "https://app.example", "Authorization": "Bearer k"},
    )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    exposed = r.headers["access-control-expose-headers"].lower()
    assert "x-request-id" in exposed and "x-compute-time" in exposed
    # a refusal is readable by the allowed page too
    r = client.post("/embed", json={"inputs": "a dog"}, headers={"Origin": "https://app.example"})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "https://app.example"
    # any other origin: the preflight is refused and no answer is marked readable
    for origin in ("https://evil.example", "https://app.example:8443", "http://app.example"):
        r = _preflight(client, origin)
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers, origin
        r = client.post(
            "/embed", json={"inputs": "a"}, headers={"Origin": origin, "Authorization": "Bearer k"}
        )
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers, origin


def test_no_cors_headers_by_default(model):
    client = TestClient(create_app(model))
    r = _preflight(client, "https://app.example")
    assert r.status_code == 405 and not any(h.startswith("access-control-") for h in r.headers)
    r = client.post("/embed", json={"inputs": "a"}, headers={"Origin": "https://app.example"})
    assert r.status_code == 200 and not any(h.startswith("access-control-") for h in r.headers)


def test_cors_and_access_log_flags(model, served_with, capsys):
    got = served_with(
        str(model), "--cors-origin", "https://a.example", "--cors-origin", "HTTP://B.example:81"
    )
    assert got["cors_origins"] == ["https://a.example", "http://b.example:81"]
    assert served_with(str(model))["cors_origins"] == []
    assert served_with(str(model), "--access-log")["access_log"] is True
    assert served_with(str(model), "--no-access-log")["access_log"] is False
    assert served_with(str(model))["access_log"] is False
    for bad in (
        "a.example",
        "https://a.example/path",
        "ftp://a.example",
        "https://a.example:99999",
        "https://",
    ):
        capsys.readouterr()
        assert cli_main(["serve", str(model), "--cors-origin", bad]) == 2, bad
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--cors-origin" in err and repr(bad) in err, err


def _log_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_access_log_one_json_line_per_request(model, capsys):
    client = TestClient(create_app(model, api_key="k", access_log=True))
    capsys.readouterr()
    key = {"Authorization": "Bearer k"}
    assert (
        client.post("/embed", json={"inputs": "a"}, headers={**key, "x-request-id": "abc-1"}).status_code
        == 200
    )
    assert client.get("/nope?token=secret", headers=key).status_code == 404
    assert client.post("/embed", json={"inputs": []}, headers=key).status_code == 422
    assert client.post("/embed", json={"inputs": "a"}).status_code == 401  # refused before the route
    err = capsys.readouterr().err
    lines = _log_lines(err)
    assert len(lines) == 4 and len(err.strip().splitlines()) == 4, err
    assert [(x["method"], x["path"], x["status"]) for x in lines] == [
        ("POST", "/embed", 200),
        ("GET", "/nope", 404),  # the query string is left out
        ("POST", "/embed", 422),
        ("POST", "/embed", 401),
    ]
    assert lines[0]["request_id"] == "abc-1"
    for x in lines:
        assert set(x) == {"ts", "method", "path", "status", "ms", "request_id"}
        assert isinstance(x["ms"], float) and x["ms"] >= 0 and x["ts"].endswith("+00:00")
        assert isinstance(x["request_id"], str) and len(x["request_id"]) > 0
    assert len({x["request_id"] for x in lines[1:]}) == 3  # fresh ids where the client sent none


def test_access_log_records_a_bug_as_500(model, capsys, monkeypatch):
    app = create_app(model, access_log=True)

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(app.state.service, "info", broken)
    client = TestClient(app, raise_server_exceptions=False)
    capsys.readouterr()
    assert client.get("/info").status_code == 500
    lines = _log_lines(capsys.readouterr().err)
    assert [(x["path"], x["status"]) for x in lines] == [("/info", 500)]


def test_no_access_log_by_default(model, capsys):
    client = TestClient(create_app(model))
    capsys.readouterr()
    assert client.post("/embed", json={"inputs": "a"}).status_code == 200
    assert _log_lines(capsys.readouterr().err) == []


def test_access_log_line_is_written_before_the_last_byte_leaves():
    # a client that has its whole answer must find its line: the real-server test reads the log then
    import asyncio
    import io

    from bertkit.serving.access_log import AccessLog

    stream = io.StringIO()
    seen = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 201, "headers": [(b"x-request-id", b"r1")]})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    async def send(message):
        seen.append((message["type"], message.get("more_body", False), stream.getvalue().count("\n")))

    scope = {"type": "http", "method": "GET", "path": "/x"}
    asyncio.run(AccessLog(app, stream=stream)(scope, None, send))
    assert seen == [
        ("http.response.start", False, 0),
        ("http.response.body", True, 0),
        ("http.response.body", False, 1),
    ]
    lines = _log_lines(stream.getvalue())
    assert [(x["path"], x["status"], x["request_id"]) for x in lines] == [("/x", 201, "r1")]


def test_access_log_flag_on_a_real_server(model, tmp_path):
    with Server(model, tmp_path, "--access-log") as s:
        status, _, headers = s.request("POST", "/embed", {"inputs": "a dog"})
        assert status == 200
        s.request("POST", "/embed", {"inputs": []})
        out = s.output()
    lines = [x for x in _log_lines(out) if x["path"] == "/embed"]
    assert [x["status"] for x in lines] == [200, 422], out
    assert lines[0]["request_id"] == headers["x-request-id"]


LONG = "the cat " * 20  # 42 tokens with [CLS]/[SEP]; the tiny models take 32


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    from bertkit.heads.finetune import BertForSequenceClassification

    root = tmp_path_factory.mktemp("auto-truncate")
    return {
        "cls": tiny_dir(BertForSequenceClassification, root / "cls", id2label={0: "neg", 1: "pos"}),
        "rank": tiny_dir(BertForSequenceClassification, root / "rank", num_labels=1),
    }


def _tei_requests(heads, model):
    """(model dir, path, body, field the refusal must name) for every TEI/OpenAI request with a long input
    and no truncate field."""
    return [
        (model, "/embed", {"inputs": ["a dog", LONG]}, "inputs[1]"),
        (model, "/embed_all", {"inputs": LONG}, "inputs[0]"),
        (
            model,
            "/similarity",
            {"inputs": {"source_sentence": "a", "sentences": [LONG]}},
            "inputs.sentences[0]",
        ),
        (model, "/rerank", {"query": LONG, "texts": ["a dog"]}, "query"),
        (model, "/v1/embeddings", {"input": ["a", LONG]}, "input[1]"),
        (model, "/v1/embeddings", {"input": [[2] + [5] * 40 + [3]]}, "input"),
        (heads["cls"], "/predict", {"inputs": LONG}, "inputs[0]"),
        (heads["rank"], "/rerank", {"query": "a dog", "texts": ["a", LONG]}, "texts[1]"),  # the pair: 45
    ]


def test_without_auto_truncate_long_inputs_are_refused_as_tei_refuses_them(heads, model):
    clients = {}
    for d, path, body, name in _tei_requests(heads, model):
        client = clients.setdefault(d, TestClient(create_app(d)))
        assert client.get("/info").json()["auto_truncate"] is False
        r = client.post(path, json=body)
        assert r.status_code == 413, (path, r.text)
        if path.startswith("/v1/"):
            err = r.json()["error"]
            assert err["code"] == "validation" and err["param"] == "input", err
            msg = err["message"]
        else:
            assert r.json()["error_type"] == "validation", r.json()
            msg = r.json()["error"]
        tokens = 45 if name == "texts[1]" else 42  # a pair adds the query and a [SEP]
        assert f"{name} is {tokens} tokens" in msg and "32" in msg and "--auto-truncate" in msg, msg
        # truncate: true on the TEI routes that take it cuts instead
        if not path.startswith("/v1/"):
            if path == "/similarity":
                body = {**body, "parameters": {"truncate": True}}
            else:
                body = {**body, "truncate": True}
            assert client.post(path, json=body).status_code == 200, path
    # bertkit's own shape keeps cutting (its --long-text policy)
    r = clients[model].post("/embed", json={"texts": [LONG]})
    assert r.status_code == 200


def test_auto_truncate_cuts_what_a_request_does_not_say(heads, model):
    plain = TestClient(create_app(model))
    clients = {}
    for d, path, body, _ in _tei_requests(heads, model):
        client = clients.setdefault(d, TestClient(create_app(d, auto_truncate=True)))
        assert client.get("/info").json()["auto_truncate"] is True
        r = client.post(path, json=body)
        assert r.status_code == 200, (path, r.text)
    auto = clients[model]
    want = plain.post("/embed", json={"inputs": LONG, "truncate": True}).json()
    got = auto.post("/embed", json={"inputs": LONG}).json()
    assert got == want
    v1 = auto.post("/v1/embeddings", json={"input": LONG}).json()["data"][0]["embedding"]
    assert v1 == pytest.approx(want[0], abs=1e-6)
    # a request that says truncate: false is still refused
    r = auto.post("/embed", json={"inputs": LONG, "truncate": False})
    assert r.status_code == 413 and "inputs[0] is 42 tokens" in r.json()["error"]


def test_auto_truncate_flag(model, served_with):
    assert served_with(str(model), "--auto-truncate")["auto_truncate"] is True
    assert served_with(str(model))["auto_truncate"] is False
