"""Prompts of a sentence-transformers folder (config_sentence_transformers.json): SentenceEncoder.encode,
``bertkit embed --prompt-name`` and the server's ``prompt_name`` give sentence-transformers' vectors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertkit.cli import main as cli_main
from bertkit.errors import UserError
from bertkit.prompts import Prompts
from bertkit.sentence.encoder import SentenceEncoder

TEXTS = ["how do cats sleep", "Cats sleep up to sixteen hours a day.", "a dog"]
PROMPTS = {"query": "query: ", "passage": "passage: "}


@pytest.fixture(scope="module")
def prompted(minilm_dir, tmp_path_factory):
    """MiniLM as a sentence-transformers folder with E5-style prompts and a default prompt name."""
    out = tmp_path_factory.mktemp("prompts") / "st"
    shutil.copytree(minilm_dir, out)
    cfg = json.loads((out / "config_sentence_transformers.json").read_text())
    cfg.update(prompts=PROMPTS, default_prompt_name="passage")
    (out / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module")
def reference(prompted):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(prompted), device="cpu")
    return {
        name: model.encode(TEXTS, prompt_name=name, convert_to_numpy=True) for name in ("query", "passage")
    } | {"none": model.encode(TEXTS, prompt="", convert_to_numpy=True)}


def test_encoder_prompts_equal_sentence_transformers(prompted, reference):
    enc = SentenceEncoder.from_pretrained(prompted)
    assert enc.prompts == Prompts(PROMPTS, "passage")
    for name in ("query", "passage"):
        np.testing.assert_allclose(enc.encode(TEXTS, prompt_name=name), reference[name], atol=1e-5)
    np.testing.assert_allclose(enc.encode(TEXTS), reference["passage"], atol=1e-5)  # the default
    np.testing.assert_allclose(enc.encode(TEXTS, prompt=""), reference["none"], atol=1e-5)
    assert not np.allclose(reference["query"], reference["passage"], atol=1e-3)
    with pytest.raises(UserError, match="'title' is not one of this model's prompts"):
        enc.encode(TEXTS, prompt_name="title")


def test_cli_embed_prompt_name(prompted, reference, tmp_path):
    (tmp_path / "t.txt").write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "q.npy"
    args = ["embed", str(prompted), "--input", str(tmp_path / "t.txt"), "--out", str(out)]
    assert cli_main([*args, "--prompt-name", "query"]) == 0
    np.testing.assert_allclose(np.load(out), reference["query"], atol=1e-5)
    assert cli_main([*args, "--prompt-name", "title"]) == 2


def test_server_prompt_name(prompted, reference):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app

    client = TestClient(create_app(prompted))
    got = client.post("/embed", json={"inputs": TEXTS, "prompt_name": "query"}).json()
    np.testing.assert_allclose(np.array(got), reference["query"], atol=1e-5)
    default = client.post("/embed", json={"texts": TEXTS}).json()["embeddings"]
    np.testing.assert_allclose(np.array(default), reference["passage"], atol=1e-5)
    info = client.get("/info").json()
    assert info["prompts"] == PROMPTS and info["default_prompt_name"] == "passage"
    r = client.post("/embed", json={"inputs": "a", "prompt_name": "title"})
    assert r.status_code == 422 and "'title'" in r.json()["error"] and "query" in r.json()["error"]


@pytest.mark.parametrize(
    "cfg, words",
    [
        ("{", ["not valid JSON"]),
        ('{"prompts": ["query: "]}', ["prompts"]),
        ('{"prompts": {"q": 1}}', ["prompts"]),
        ('{"prompts": {"q": "q: "}, "default_prompt_name": "p"}', ["default_prompt_name", "'p'"]),
    ],
)
def test_bad_prompt_configs_are_one_line(tmp_path, cfg, words):
    (tmp_path / "config_sentence_transformers.json").write_text(cfg)
    with pytest.raises(UserError) as e:
        Prompts.from_folder(tmp_path)
    assert "config_sentence_transformers.json" in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_pooling_that_excludes_the_prompt_refuses_prompts(prompted, tmp_path):
    """include_prompt: false pools without the prompt's tokens; bertkit refuses rather than differ."""
    folder = tmp_path / "excl"
    shutil.copytree(prompted, folder)
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "include_prompt": False}))
    enc = SentenceEncoder.from_pretrained(folder)
    with pytest.raises(UserError, match="include_prompt"):
        enc.encode(TEXTS)  # the default prompt
    np.testing.assert_allclose(
        enc.encode(TEXTS, prompt=""), SentenceEncoder.from_pretrained(prompted).encode(TEXTS, prompt="")
    )
