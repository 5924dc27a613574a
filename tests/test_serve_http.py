"""The HTTP server: endpoints through FastAPI's TestClient (no network), and one real uvicorn process."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("httpx", reason="TestClient needs httpx (test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from bertkit.config import BertConfig  # noqa: E402
from bertkit.heads.finetune import BertForSequenceClassification  # noqa: E402
from bertkit.heads.pretraining import BertForMaskedLM  # noqa: E402
from bertkit.model import BertModel  # noqa: E402
from bertkit.sentence.encoder import SentenceEncoder  # noqa: E402
from bertkit.serving import InferenceService, create_app  # noqa: E402
from bertkit.serving.launch import ServerProcess, health_ok  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402

WORDS = "the a cat dog sat on mat good bad movie was very".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
ROOT = Path(__file__).resolve().parents[1]


def _tiny(cls, out: Path, **overrides) -> Path:
    torch.manual_seed(0)
    config = BertConfig.preset(
        "tiny", vocab_size=len(VOCAB), max_position_embeddings=32, num_hidden_layers=1, **overrides
    )
    model = cls(config)
    model.save_pretrained(out)
    Tokenizer.from_vocab(VOCAB).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    return {
        "enc": _tiny(BertModel, root / "enc"),
        "cls": _tiny(
            BertForSequenceClassification, root / "cls", id2label={0: "negative", 1: "neutral", 2: "positive"}
        ),
        "mlm": _tiny(BertForMaskedLM, root / "mlm"),
    }


def test_health_info_tokenize_and_limits(dirs):
    client = TestClient(create_app(dirs["enc"], max_batch_size=4))
    assert client.get("/health").json() == {"status": "ok"}
    info = client.get("/info").json()
    assert info["architecture"] == "BertModel" and info["hidden_size"] == 128 and info["max_batch_size"] == 4
    assert "/predict" not in info["endpoints"] and "/embed" in info["endpoints"]

    tok = client.post("/tokenize", json={"text": "the cat", "pair": "a dog"}).json()
    assert tok["tokens"] == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "[SEP]"]
    assert tok["type_ids"] == [0, 0, 0, 0, 1, 1, 1]

    # validation: clear 422s for a wrong type, an empty list and too many texts
    r = client.post("/embed", json={"texts": "the cat"})
    assert r.status_code == 422 and "texts" in r.text
    r = client.post("/embed", json={"texts": []})
    assert r.status_code == 422 and "at least one" in r.json()["error"]
    assert r.json()["error_type"] == "validation"
    r = client.post("/embed", json={"texts": ["the"] * 5})
    assert (
        r.status_code == 413 and "at most 4" in r.json()["error"] and "--max-batch-size" in r.json()["error"]
    )
    r = client.post("/embed", json={})
    assert r.status_code == 422
    # endpoints the model has no head for
    assert client.post("/predict", json={"texts": ["the cat"]}).status_code == 404
    assert client.post("/fill-mask", json={"text": "the [MASK]"}).status_code == 404


def test_embed_matches_sentence_encoder(minilm_dir):
    client = TestClient(create_app(minilm_dir))
    texts = ["A man is playing a guitar.", "Hi", "The weather is lovely today, is it not?"]
    r = client.post("/embed", json={"texts": texts})
    assert r.status_code == 200
    body = r.json()
    got = np.array(body["embeddings"], dtype=np.float32)
    assert body["dim"] == 384 and got.shape == (3, 384)
    want = SentenceEncoder.from_pretrained(minilm_dir).encode(texts)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # the Normalize module


def test_predict_labels_and_probabilities(dirs):
    svc = InferenceService(dirs["cls"], batching={"max_batch_tokens": 16})  # several model batches
    client = TestClient(create_app(svc))
    assert client.get("/info").json()["labels"] == ["negative", "neutral", "positive"]
    texts = ["the movie was very good", "bad", "the cat sat on the mat"]
    r = client.post("/predict", json={"texts": texts})
    assert r.status_code == 200
    preds = r.json()["predictions"]
    assert len(preds) == 3
    model = BertForSequenceClassification.from_pretrained(dirs["cls"])
    tok = Tokenizer.from_pretrained(dirs["cls"])
    for text, pred in zip(texts, preds):  # each prediction matches its own text (order restored)
        with torch.no_grad():
            probs = model(**tok([text])).logits.softmax(-1)[0]
        assert pred["label"] == ["negative", "neutral", "positive"][int(probs.argmax())]
        assert pred["score"] == pytest.approx(float(probs.max()), abs=1e-5)
        assert sum(pred["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    pairs = client.post("/predict", json={"texts": ["the cat"], "pairs": ["a dog"]})
    assert pairs.status_code == 200
    bad = client.post("/predict", json={"texts": ["the cat", "a dog"], "pairs": ["x"]})
    assert bad.status_code == 422 and "one pair per text" in bad.json()["error"]


def test_fill_mask(dirs):
    client = TestClient(create_app(dirs["mlm"]))
    r = client.post("/fill-mask", json={"text": "the cat sat on the [MASK]", "top_k": 3})
    assert r.status_code == 200
    masks = r.json()["masks"]
    assert len(masks) == 1 and len(masks[0]) == 3
    assert all(m["token"] in VOCAB for m in masks[0])
    scores = [m["score"] for m in masks[0]]
    assert scores == sorted(scores, reverse=True)
    r = client.post("/fill-mask", json={"text": "no mask here"})
    assert r.status_code == 422 and "[MASK]" in r.json()["error"]
    assert client.post("/fill-mask", json={"text": "[MASK]", "top_k": 0}).status_code == 422


def test_real_server_process(dirs):
    cmd = [sys.executable, "-m", "bertkit", "serve", str(dirs["enc"]), "--log-level", "warning"]
    with ServerProcess(cmd, cwd=ROOT, startup_timeout=60) as server:
        with urllib.request.urlopen(f"{server.url}/health", timeout=2) as r:
            assert json.loads(r.read()) == {"status": "ok"}
        req = urllib.request.Request(
            f"{server.url}/embed",
            data=json.dumps({"texts": ["the cat sat", "a dog"], "normalize": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            body = json.loads(r.read())
        emb = np.array(body["embeddings"])
        assert emb.shape == (2, 128)
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
        # what a TEI client and the official OpenAI client send, over the wire to the same process
        req = urllib.request.Request(
            f"{server.url}/embed",
            data=json.dumps({"inputs": ["the cat sat", "a dog"]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            tei = np.array(json.loads(r.read()))
        np.testing.assert_allclose(tei, emb, atol=1e-5)
        openai = pytest.importorskip("openai")
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)
        got = client.embeddings.create(model="enc", input=["the cat sat", "a dog"])
        np.testing.assert_allclose(np.array([d.embedding for d in got.data]), emb, atol=1e-5)
        with pytest.raises(openai.BadRequestError) as bad:  # the client shows the message and field
            client.embeddings.create(model="enc", input=["the cat"], encoding_format="int8")
        assert bad.value.param == "encoding_format" and "encoding_format" in str(bad.value)
    assert server.proc.returncode is not None and not health_ok(server.port)


def test_server_process_that_exits_is_reported_with_its_output(tmp_path):
    script = "import sys; print('no model at that path', file=sys.stderr); sys.exit(2)"
    with pytest.raises(RuntimeError, match=r"did not come up \(exited\).*no model at that path"):
        ServerProcess([sys.executable, "-c", script])
    log = tmp_path / "s.log"
    with pytest.raises(RuntimeError, match="no model at that path"):
        ServerProcess([sys.executable, "-c", script], log=log)
    assert "no model at that path" in log.read_text()


def test_server_process_that_never_gets_healthy_is_stopped(tmp_path):
    # listens on nothing and sleeps: only the deadline can end the wait, and the process must not outlive it
    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('starting'); time.sleep(600)"
    with pytest.raises(RuntimeError, match=r"not healthy after 5 s.*starting"):
        ServerProcess([sys.executable, "-u", "-c", script], startup_timeout=5)
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(int(pid_file.read_text()), 0)


def test_serve_without_fastapi_says_how_to_install(dirs, monkeypatch, capsys):
    from bertkit.cli import main as cli_main

    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ImportError
    assert cli_main(["serve", str(dirs["enc"]), "--port", "0"]) == 2
    assert "pip install 'bertkit[serve]'" in capsys.readouterr().err


def test_pairs_encode_as_the_library_truncates(minilm_dir):
    """The server's linear-time pair encoding equals the tokenizers library's pair truncation."""
    import random

    from bertkit.serving.pairs import encode_pairs

    tok = Tokenizer.from_pretrained(minilm_dir)
    rng = random.Random(0)
    words = "the cat sat on a mat unbelievably , . hello world tokenization".split()
    for _ in range(300):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))
        b = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
        length = rng.randint(5, 60)
        ref = tok([a], [b], max_length=length, truncation=True, padding=False, return_tensors=None)
        ids, types = encode_pairs(tok, [a], [b], length)
        assert (ids[0], types[0]) == (ref["input_ids"][0], ref["token_type_ids"][0]), (a, b, length)
    # an empty second text is no second segment (transformers' tok(a, "") and run_classifier.py)
    ids, types = encode_pairs(tok, ["a cat"], [""], 16)
    assert ids[0] == tok.encode("a cat").ids and types[0] == [0] * len(ids[0])
