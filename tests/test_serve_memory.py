"""The server's memory stays bounded under the largest requests its (default) limits allow, and a request
over the limits is refused before any work (issue 11: 1 MB + 1 MB on /predict once took 21 GB)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")

from serving_utils import Server  # noqa: E402

from bertkit.heads.finetune import BertForSequenceClassification  # noqa: E402
from bertkit.serving.limits import Limits  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402

RSS_BOUND_MB = 1500  # MiniLM-L6 (90 MB of weights) with the default limits
WORST = "a " * (Limits().max_text_chars // 2)  # one token per two characters: the most tokens a text can hold


@pytest.fixture(scope="module")
def server(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("serve-mem")
    model = BertForSequenceClassification.from_pretrained(minilm_dir, num_labels=2)
    model.save_pretrained(root / "cls")
    Tokenizer.from_pretrained(minilm_dir).save_pretrained(root / "cls")
    s = Server(root / "cls", root, env={"OMP_NUM_THREADS": "1"})
    yield s
    s.stop()
    assert "Traceback" not in s.output(), s.output()[-3000:]


def _token_counters(server) -> list[str]:
    """The server's ``bertkit_tokens_total`` lines from /metrics (how many tokens each task has run)."""
    status, text, _ = server.request("GET", "/metrics")
    assert status == 200
    return [line for line in text.splitlines() if line.startswith("bertkit_tokens_total")]


def test_huge_pair_refused_before_any_work(server):
    body = json.dumps({"texts": ["a" * (1 << 20)], "pairs": ["b" * (1 << 20)]}).encode()
    tokens_before, rss_before = _token_counters(server), server.peak_rss_mb()
    status, reply, _ = server.request("POST", "/predict", raw=body)
    assert status == 413 and "--max-body-bytes" in reply["error"], reply
    # refused before any work: nothing tokenised, no memory taken (the unbounded pair once took 21 GB)
    assert _token_counters(server) == tokens_before
    assert server.peak_rss_mb() - rss_before < 64
    assert server.request("GET", "/health")[0] == 200


def test_largest_allowed_requests_stay_under_the_bound(server):
    limits = Limits()
    # as many worst-case pairs as the body limit lets through
    n_pairs = (limits.max_body_bytes - 100) // (2 * len(WORST) + 16)
    body = json.dumps({"texts": [WORST] * n_pairs, "pairs": [WORST] * n_pairs}).encode()
    assert len(body) <= limits.max_body_bytes
    status, reply, _ = server.request("POST", "/predict", raw=body, timeout=600)
    assert status == 200 and len(reply["predictions"]) == n_pairs, reply
    peak = server.peak_rss_mb()
    print(f"peak RSS {peak:.0f} MB after {n_pairs} pairs of {len(WORST)} + {len(WORST)} characters")
    assert peak < RSS_BOUND_MB, peak
