"""Bad requests against a real ``bertkit serve`` process over HTTP.

Each case asserts the status (4xx), TEI's ``{"error", "error_type"}`` body with a one-line message naming
the field or limit, and ``/health`` still 200 afterwards; at the end the server's log holds no traceback.
The limits are set small on the command line so every gate is reachable with small bodies.
"""

from __future__ import annotations

import http.client
import json

import pytest

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from serving_utils import Server, tiny_dir  # noqa: E402

from bertkit.heads.finetune import (  # noqa: E402
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.heads.pretraining import BertForMaskedLM  # noqa: E402

LIMITS = ["--max-body-bytes", "65536", "--max-text-chars", "2000", "--max-batch-size", "8"]
LIMITS += ["--max-request-tokens", "200", "--max-fill-mask-predictions", "40"]
SURROGATE = b'"the \\ud800 cat"'  # valid JSON, not valid Unicode


def j(obj) -> bytes:
    return json.dumps(obj).encode()


def with_raw(template: bytes, value: bytes) -> bytes:
    return template.replace(b"@", value)


# (name, method, path, raw body or None, status, words the message must contain)
MLM_CASES = [
    ("invalid json", "POST", "/embed", b'{"texts": [', 422, ["not valid JSON"]),
    ("body not an object", "POST", "/embed", b"[1, 2]", 422, ["body"]),
    ("texts a string", "POST", "/embed", j({"texts": "the cat"}), 422, ["texts"]),
    ("texts empty", "POST", "/embed", j({"texts": []}), 422, ["texts", "at least one"]),
    ("texts holds a number", "POST", "/embed", j({"texts": ["the", 3]}), 422, ["texts[1]"]),
    ("texts holds null", "POST", "/embed", j({"texts": [None]}), 422, ["texts[0]"]),
    ("texts and inputs", "POST", "/embed", j({"texts": ["a"], "inputs": "a"}), 422, ["texts", "inputs"]),
    ("neither texts nor inputs", "POST", "/embed", j({"normalize": True}), 422, ["texts", "inputs"]),
    ("too many texts", "POST", "/embed", j({"texts": ["the"] * 9}), 413, ["--max-batch-size", "8"]),
    ("text too long", "POST", "/embed", j({"texts": ["a" * 2001]}), 413, ["texts[0]", "--max-text-chars"]),
    (
        "lone high surrogate",
        "POST",
        "/embed",
        with_raw(b'{"texts": [@]}', SURROGATE),
        422,
        ["texts[0]", "surrogate"],
    ),
    ("decode id range", "POST", "/decode", j({"ids": [[2, 3], [2, 17]]}), 422, ["ids[1]", "token id 17"]),
    ("decode no ids", "POST", "/decode", j({"ids": []}), 422, ["ids", "at least one"]),
    ("decode text", "POST", "/decode", j({"ids": "the cat"}), 422, ["ids"]),
    (
        "tokenize text and inputs",
        "POST",
        "/tokenize",
        j({"text": "a", "inputs": "a"}),
        422,
        ["text", "inputs"],
    ),
    ("tokenize tei pair", "POST", "/tokenize", j({"inputs": "a", "pair": "b"}), 422, ["pair"]),
    ("tokenize tei empty", "POST", "/tokenize", j({"inputs": []}), 422, ["inputs", "at least one"]),
    ("embed_all empty", "POST", "/embed_all", j({"inputs": []}), 422, ["inputs", "at least one"]),
    (
        "embed_all truncate false",
        "POST",
        "/embed_all",
        j({"inputs": "the cat " * 20, "truncate": False}),
        413,
        ["inputs[0]", "42 tokens"],
    ),
    ("embed_all unknown prompt", "POST", "/embed_all", j({"inputs": "a", "prompt_name": "q"}), 422, ["'q'"]),
    (
        "similarity no sentences",
        "POST",
        "/similarity",
        j({"inputs": {"source_sentence": "a", "sentences": []}}),
        422,
        ["inputs.sentences", "at least one"],
    ),
    (
        "similarity flat",
        "POST",
        "/similarity",
        j({"source_sentence": "a", "sentences": ["b"]}),
        422,
        ["inputs", "required"],
    ),
    ("embed unknown field", "POST", "/embed", j({"inputs": "a", "normalise": True}), 422, ["'normalise'"]),
    ("rerank unknown field", "POST", "/rerank", j({"query": "a", "texts": ["b"], "x": 1}), 422, ["'x'"]),
    (
        "embed truncation direction",
        "POST",
        "/embed",
        j({"inputs": "a", "truncation_direction": "Up"}),
        422,
        ["truncation_direction", "Up"],
    ),
    (
        "embed truncate false over the limit",
        "POST",
        "/embed",
        j({"inputs": ["a", "the cat " * 20], "truncate": False}),
        413,
        ["inputs[1]", "42 tokens", "32", "max_input_length"],
    ),
    ("lone low surrogate", "POST", "/embed", b'{"texts": ["ok", "\\udc00"]}', 422, ["texts[1]", "surrogate"]),
    (
        "tei inputs surrogate",
        "POST",
        "/embed",
        with_raw(b'{"inputs": @}', SURROGATE),
        422,
        ["inputs[0]", "surrogate"],
    ),
    (
        "token budget",
        "POST",
        "/embed",
        j({"texts": ["the cat " * 20] * 8}),
        413,
        ["--max-request-tokens", "200"],
    ),
    ("dimensions zero", "POST", "/embed", j({"texts": ["a"], "dimensions": 0}), 422, ["dimensions"]),
    (
        "dimensions too big",
        "POST",
        "/embed",
        j({"texts": ["a"], "dimensions": 4096}),
        422,
        ["dimensions", "128"],
    ),
    ("normalize a list", "POST", "/embed", j({"texts": ["a"], "normalize": [1]}), 422, ["normalize"]),
    ("long_text unknown", "POST", "/embed", j({"texts": ["a"], "long_text": "sideways"}), 422, ["long_text"]),
    (
        "no truncation asked",
        "POST",
        "/embed",
        j({"inputs": "the cat " * 30, "truncate": False}),
        413,
        ["truncate", "32"],
    ),
    ("body over limit", "POST", "/embed", j({"texts": ["a" * 70000]}), 413, ["--max-body-bytes", "65536"]),
    (
        "openai format",
        "POST",
        "/v1/embeddings",
        j({"input": "a", "encoding_format": "hex"}),
        400,
        ["encoding_format"],
    ),
    ("openai empty", "POST", "/v1/embeddings", j({"input": []}), 400, ["input", "at least one"]),
    ("openai missing input", "POST", "/v1/embeddings", j({"model": "x"}), 400, ["input"]),
    (
        "openai surrogate",
        "POST",
        "/v1/embeddings",
        with_raw(b'{"input": @}', SURROGATE),
        400,
        ["input[0]", "surrogate"],
    ),
    (
        "openai model surrogate",
        "POST",
        "/v1/embeddings",
        with_raw(b'{"input": "a", "model": @}', SURROGATE),
        400,
        ["model", "surrogate"],
    ),
    ("openai token id range", "POST", "/v1/embeddings", j({"input": [[2, 17, 3]]}), 400, ["token id 17"]),
    ("openai negative token id", "POST", "/v1/embeddings", j({"input": [2, -1]}), 400, ["token id -1"]),
    ("openai empty ids", "POST", "/v1/embeddings", j({"input": [[2, 3], []]}), 400, ["input[1]", "no token"]),
    ("openai ids too long", "POST", "/v1/embeddings", j({"input": [[5] * 33]}), 413, ["33 tokens", "32"]),
    ("openai ids and texts", "POST", "/v1/embeddings", j({"input": ["a", [2, 3]]}), 400, ["input"]),
    ("openai ids batch", "POST", "/v1/embeddings", j({"input": [[2, 3]] * 9}), 413, ["--max-batch-size"]),
    ("openai unknown field", "POST", "/v1/embeddings", j({"input": "a", "top_p": 1}), 400, ["'top_p'"]),
    (
        "openai body over limit",
        "POST",
        "/v1/embeddings",
        j({"input": ["a" * 70000]}),
        413,
        ["--max-body-bytes", "65536"],
    ),
    ("rerank no texts", "POST", "/rerank", j({"query": "the"}), 422, ["texts"]),
    (
        "rerank query surrogate",
        "POST",
        "/rerank",
        with_raw(b'{"query": @, "texts": ["a"]}', SURROGATE),
        422,
        ["query", "surrogate"],
    ),
    (
        "rerank too many",
        "POST",
        "/rerank",
        j({"query": "a", "texts": ["the"] * 9}),
        413,
        ["--max-batch-size"],
    ),
    ("predict without head", "POST", "/predict", j({"texts": ["the cat"]}), 404, ["/predict", "/fill-mask"]),
    ("top_k zero", "POST", "/fill-mask", j({"text": "the [MASK]", "top_k": 0}), 422, ["top_k"]),
    (
        "top_k over vocab",
        "POST",
        "/fill-mask",
        j({"text": "the [MASK]", "top_k": 1000}),
        422,
        ["top_k", "17"],
    ),
    ("top_k a word", "POST", "/fill-mask", j({"text": "the [MASK]", "top_k": "many"}), 422, ["top_k"]),
    ("top_k huge float", "POST", "/fill-mask", b'{"text": "the [MASK]", "top_k": 1e309}', 422, ["top_k"]),
    ("no mask", "POST", "/fill-mask", j({"text": "the cat"}), 422, ["[MASK]"]),
    (
        "fill-mask surrogate",
        "POST",
        "/fill-mask",
        with_raw(b'{"text": @}', SURROGATE),
        422,
        ["text", "surrogate"],
    ),
    (
        "fill-mask masks x top_k",
        "POST",
        "/fill-mask",
        j({"text": "[MASK] [MASK] [MASK]", "top_k": 17}),
        413,
        ["3 masks", "51", "--max-fill-mask-predictions", "40"],
    ),
    (
        "fill-mask too long",
        "POST",
        "/fill-mask",
        j({"text": "the cat " * 20 + "[MASK]"}),
        413,
        ["tokens", "32"],
    ),
    ("tokenize too long", "POST", "/tokenize", j({"text": "a" * 2001}), 413, ["--max-text-chars"]),
    (
        "tokenize pair surrogate",
        "POST",
        "/tokenize",
        with_raw(b'{"text": "a", "pair": @}', SURROGATE),
        422,
        ["pair", "surrogate"],
    ),
    ("deep nesting", "POST", "/embed", b'{"texts": ' + b"[" * 20000 + b"]" * 20000 + b"}", 400, ["JSON"]),
    ("unknown route", "GET", "/nope", None, 404, ["/nope", "/info"]),
    ("wrong method", "GET", "/embed", None, 405, ["GET", "/embed"]),
    ("docs off", "GET", "/docs", None, 404, ["/docs"]),
    ("openapi off", "GET", "/openapi.json", None, 404, ["/openapi.json"]),
]

CLS_CASES = [
    (
        "pairs count",
        "POST",
        "/predict",
        j({"texts": ["the", "a"], "pairs": ["cat"]}),
        422,
        ["pairs", "one pair per text"],
    ),
    (
        "pair surrogate",
        "POST",
        "/predict",
        with_raw(b'{"texts": ["a"], "pairs": [@]}', SURROGATE),
        422,
        ["pairs[0]", "surrogate"],
    ),
    ("tei three items", "POST", "/predict", j({"inputs": [["a", "b", "c"]]}), 422, ["inputs[0]"]),
    ("tei empty inputs", "POST", "/predict", j({"inputs": []}), 422, ["inputs", "at least one"]),
    ("tei mixed", "POST", "/predict", j({"inputs": ["a", ["b", "c"]]}), 422, ["mixes"]),
    (
        "windows with pairs",
        "POST",
        "/predict",
        j({"texts": ["a"], "pairs": ["b"], "long_text": "windows"}),
        422,
        ["windows", "pairs"],
    ),
    (
        "pair budget",
        "POST",
        "/predict",
        j({"texts": ["the cat " * 10] * 8, "pairs": ["a"] * 8}),
        413,
        ["--max-request-tokens"],
    ),
    (
        "fill-mask without head",
        "POST",
        "/fill-mask",
        j({"text": "the [MASK]"}),
        404,
        ["/fill-mask", "/predict"],
    ),
    ("neither texts nor inputs", "POST", "/predict", j({}), 422, ["texts"]),
]

QA_CASES = [
    ("qa no context", "POST", "/qa", j({"question": "who"}), 422, ["question and context"]),
    ("qa both shapes", "POST", "/qa", j({"question": "a", "context": "b", "inputs": []}), 422, ["not both"]),
    ("qa empty inputs", "POST", "/qa", j({"inputs": []}), 422, ["inputs", "at least one"]),
    (
        "qa stride zero",
        "POST",
        "/qa",
        j({"question": "a", "context": "b", "doc_stride": 0}),
        422,
        ["doc_stride"],
    ),
    (
        "qa stride too big",
        "POST",
        "/qa",
        j({"question": "a", "context": "b", "doc_stride": 999}),
        422,
        ["doc_stride"],
    ),
    (
        "qa answer length",
        "POST",
        "/qa",
        j({"question": "a", "context": "b", "max_answer_length": 0}),
        422,
        ["max_answer_length"],
    ),
    (
        "qa blank question",
        "POST",
        "/qa",
        j({"question": " ", "context": "the cat"}),
        422,
        ["question and context"],
    ),
    (
        "qa context surrogate",
        "POST",
        "/qa",
        with_raw(b'{"question": "a", "context": @}', SURROGATE),
        422,
        ["context", "surrogate"],
    ),
    (
        "qa context too long",
        "POST",
        "/qa",
        j({"question": "a", "context": "a" * 2001}),
        413,
        ["context", "--max-text-chars"],
    ),
    (
        "qa token budget",
        "POST",
        "/qa",
        j({"question": "a", "context": "the cat " * 200}),
        413,
        ["--max-request-tokens"],
    ),
    ("qa item not an object", "POST", "/qa", j({"inputs": ["who?"]}), 422, ["inputs[0]"]),
    (
        "qa context without tokens",
        "POST",
        "/qa",
        j({"question": "who", "context": "\u200b\u200b \x07"}),
        422,
        ["context", "no tokens"],
    ),
]

NER_CASES = [
    ("ner both", "POST", "/ner", j({"text": "a", "words": ["a"]}), 422, ["text", "words"]),
    ("ner neither", "POST", "/ner", j({"aggregation": "first"}), 422, ["text", "words"]),
    ("ner no words", "POST", "/ner", j({"words": []}), 422, ["words", "at least one"]),
    ("ner word with space", "POST", "/ner", j({"words": ["the", "a b"]}), 422, ["words[1]", "whitespace"]),
    (
        "ner aggregation",
        "POST",
        "/ner",
        j({"text": "the cat", "aggregation": "average"}),
        422,
        ["aggregation"],
    ),
    ("ner surrogate", "POST", "/ner", with_raw(b'{"text": @}', SURROGATE), 422, ["text", "surrogate"]),
    ("ner token budget", "POST", "/ner", j({"text": "the cat " * 200}), 413, ["--max-request-tokens"]),
    ("ner text too long", "POST", "/ner", j({"text": "a" * 2001}), 413, ["--max-text-chars"]),
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-server")
    mlm = tiny_dir(BertForMaskedLM, root / "mlm")
    cls = tiny_dir(BertForSequenceClassification, root / "cls", id2label={0: "neg", 1: "pos"})
    qa = tiny_dir(BertForQuestionAnswering, root / "qa")
    ner = tiny_dir(
        BertForTokenClassification, root / "ner", num_labels=3, id2label={0: "O", 1: "B-X", 2: "I-X"}
    )
    started = {}
    try:
        for name, d in (("mlm", mlm), ("cls", cls), ("qa", qa), ("ner", ner)):
            started[name] = Server(d, root, *LIMITS)
        yield started
    finally:
        for s in started.values():
            s.stop()
        for s in started.values():
            assert "Traceback" not in s.output(), s.output()[-3000:]


def _check(server: Server, case) -> None:
    name, method, path, raw, status, words = case
    got, body, _ = server.request(method, path, raw=raw)
    assert got == status, (name, got, body)
    if path.startswith("/v1/"):  # OpenAI's shape, so its clients show the message
        assert isinstance(body, dict) and set(body) == {"error"}, (name, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}, (name, body)
        msg = body["error"]["message"]
    else:
        assert isinstance(body, dict) and set(body) == {"error", "error_type"}, (name, body)
        msg = body["error"]
    assert "\n" not in msg and 0 < len(msg) <= 300, (name, msg)
    for w in words:
        assert w in msg, (name, w, msg)
    assert server.request("GET", "/health")[0] == 200, name


@pytest.mark.parametrize("case", MLM_CASES, ids=[c[0] for c in MLM_CASES])
def test_bad_request_mlm_server(servers, case):
    _check(servers["mlm"], case)


@pytest.mark.parametrize("case", CLS_CASES, ids=[c[0] for c in CLS_CASES])
def test_bad_request_cls_server(servers, case):
    _check(servers["cls"], case)


@pytest.mark.parametrize("case", QA_CASES, ids=[c[0] for c in QA_CASES])
def test_bad_request_qa_server(servers, case):
    _check(servers["qa"], case)


@pytest.mark.parametrize("case", NER_CASES, ids=[c[0] for c in NER_CASES])
def test_bad_request_ner_server(servers, case):
    _check(servers["ner"], case)


def test_chunked_body_over_limit_is_refused_while_streaming(servers):
    """No Content-Length: the body is counted as it arrives and refused past --max-body-bytes."""
    server = servers["mlm"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    chunks = iter([b'{"texts": ["'] + [b"a" * 8192] * 10 + [b'"]}'])
    try:
        conn.request(
            "POST", "/embed", body=chunks, headers={"Content-Type": "application/json"}, encode_chunked=True
        )
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered 413 and closed before the client had sent the rest: the answer is read below
    r = conn.getresponse()
    body = json.loads(r.read())
    conn.close()
    assert r.status == 413 and "--max-body-bytes" in body["error"], body
    assert server.request("GET", "/health")[0] == 200


def test_good_requests_still_work_and_info_has_no_path(servers):
    server = servers["mlm"]
    status, body, _ = server.request("POST", "/embed", {"texts": ["the cat sat"]})
    assert status == 200 and len(body["embeddings"][0]) == 128
    status, body, _ = server.request("POST", "/fill-mask", {"text": "[MASK] and [MASK]", "top_k": 17})
    assert status == 200 and [len(m) for m in body["masks"]] == [17, 17]  # 34: inside the limit of 40
    status, body, _ = server.request("POST", "/rerank", {"query": "the", "texts": ["a cat"] * 8})
    assert status == 200 and len(body) == 8  # exactly --max-batch-size texts: the query is not one of them
    status, info, _ = server.request("GET", "/info")
    assert status == 200
    assert "/" not in json.dumps({k: v for k, v in info.items() if k != "endpoints"}), info
    assert server.request("POST", "/embed", {"texts": []})[0] == 422
    assert server.request("POST", "/embed", {"texts": ["a" * 2001]})[0] == 413
    status, text, _ = server.request("GET", "/metrics")
    assert status == 200 and 'bertkit_errors_total{error_type="validation",status="422"}' in text
    for name in (
        'bertkit_requests_total{route="/embed"}',
        'bertkit_errors_total{error_type="payload_too_large",status="413"}',
        'bertkit_request_seconds_bucket{le="0.1",route="/embed"}',
        'bertkit_batch_size_bucket{le="1.0",task="embed"}',
        'bertkit_tokens_total{task="embed"}',
        "bertkit_queue_depth 0.0",
    ):
        assert name in text, name


def _closed_by_server(sock, wait: float = 15.0) -> bytes:
    """Read until the server closes the connection (at most ``wait`` seconds); returns what it sent."""
    import time

    got = b""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the server kept the connection open for {wait} s (sent {got[:200]!r})")


def test_stalled_and_surplus_connections_are_closed(tmp_path):
    """Slow-loris clients: connections over --max-connections get a 503 and are closed at once; requests
    whose headers or body stall past --read-timeout, and idle keep-alive connections, are closed; the
    server answers /health throughout."""
    import socket

    model = tiny_dir(BertForMaskedLM, tmp_path / "mlm")
    flags = ["--max-connections", "6", "--read-timeout", "1", "--keep-alive", "1"]
    # a batch waits 1.5 s to fill: longer than the read deadline, which must not count the model's time
    server = Server(model, tmp_path, *flags, "--max-wait-ms", "1500")
    socks = []
    try:

        def connect(first: bytes = b""):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=15)
            socks.append(s)
            if first:
                s.sendall(first)
            return s

        half_headers = [connect(b"POST /embed HTTP/1.1\r\nHost: x\r\n") for _ in range(3)]
        half_body = [
            connect(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"texts": ')
            for _ in range(2)
        ]
        silent = connect()  # six open: the limit
        surplus = connect()
        answer = _closed_by_server(surplus, wait=5)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and "--max-connections" in json.loads(body)["error"]
        for s in [*half_headers, *half_body, silent]:
            _closed_by_server(s)  # each closed by the read deadline, not left open
        assert server.request("GET", "/health")[0] == 200
        status, body, _ = server.request("POST", "/embed", {"texts": ["the cat"]})
        assert status == 200 and len(body["embeddings"]) == 1
        idle = connect(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _closed_by_server(idle).startswith(b"HTTP/1.1 200")  # answered, then closed once idle
        for _ in range(5):
            connect()  # five open again, and the sixth below is served: the closed ones freed their slots
        assert server.request("GET", "/health")[0] == 200
    finally:
        for s in socks:
            s.close()
        server.stop()
    assert "Traceback" not in server.output() and "Too many open files" not in server.output()
