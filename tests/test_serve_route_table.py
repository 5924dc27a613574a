"""The route table (``bertkit.serving.routes.ROUTES``): one module and one line per route, every line mounted,
``/info`` and the 404s derived from it; the model calls import without the serve extra; head classes come from
``bertkit.heads``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.architectures import model_class
from bertkit.heads import finetune, pretraining
from bertkit.model import BertModel
from bertkit.serving.routes import ROUTES
from tests.serving_utils import tiny_dir

ROOT = Path(__file__).resolve().parents[1]
ROUTES_DIR = ROOT / "bertkit" / "serving" / "routes"


def test_every_route_module_has_one_table_line():
    modules = {p.stem for p in ROUTES_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert sorted(r.module for r in ROUTES) == sorted(modules)
    assert len({r.path for r in ROUTES}) == len(ROUTES)
    assert all(r.method in ("GET", "POST") and bool(r.heads) == bool(r.head) for r in ROUTES)


def test_the_app_mounts_the_table_and_info_and_404s_follow_it(tmp_path):
    pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
    pytest.importorskip("httpx", reason="TestClient needs httpx (test extra)")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app

    app = create_app(tiny_dir(finetune.BertForQuestionAnswering, tmp_path / "qa"))
    mounted = {(r.path, m) for r in app.routes if hasattr(r, "methods") for m in r.methods}
    assert {(r.path, r.method) for r in ROUTES} <= mounted
    with TestClient(app) as client:
        endpoints = client.get("/info").json()["endpoints"]
        assert endpoints == [r.path for r in ROUTES if not r.heads or "BertForQuestionAnswering" in r.heads]
        r = client.post("/ner", json={"text": "the cat"})
        assert r.status_code == 404 and r.json()["error_type"] == "unsupported"
        assert "token-classification head" in r.json()["error"] and "/qa" in r.json()["error"]


def test_model_calls_import_without_the_serve_extra():
    # `bertkit predict` runs /qa's, /ner's and /predict's model calls: no FastAPI or pydantic needed
    code = (
        "import sys\n"
        "for m in ('fastapi', 'pydantic', 'starlette', 'prometheus_client', 'uvicorn'): sys.modules[m] = None\n"
        "import bertkit.cli.predict_spans, bertkit.serving.routes.qa, bertkit.serving.routes.ner\n"
        "import bertkit.serving.routes.predict, bertkit.serving.routes.decode\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(
    "name, cls",
    [
        ("BertForSequenceClassification", finetune.BertForSequenceClassification),
        ("BertForTokenClassification", finetune.BertForTokenClassification),
        ("BertForQuestionAnswering", finetune.BertForQuestionAnswering),
        ("BertForMultipleChoice", finetune.BertForMultipleChoice),
        ("BertForMaskedLM", pretraining.BertForMaskedLM),
        ("BertForPreTraining", pretraining.BertForPreTraining),
        ("BertModel", BertModel),
        ("BertForSomethingElse", BertModel),  # unknown: the bare encoder, as before
        ("CRF", BertModel),  # a name bertkit.heads exports that is not a model
    ],
)
def test_head_classes_come_from_the_heads_registry(name, cls):
    assert model_class(name) is cls


@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory):
    """A transformers-saved ModernBERT folder, built once for the class-lookup cases."""
    from bpe_folder import modernbert_folder

    folder = tmp_path_factory.mktemp("modernbert-classes")
    modernbert_folder(folder)
    return folder


@pytest.mark.parametrize(
    "name, cls_name",
    [
        ("ModernBertForSequenceClassification", "ModernBertForSequenceClassification"),
        ("ModernBertForMultipleChoice", "ModernBertForMultipleChoice"),
        ("ModernBertForPreTraining", "ModernBertForPreTraining"),  # the NSP arm's checkpoints
        ("ModernBertForSomethingElse", "ModernBertModel"),
        ("BertForMaskedLM", "ModernBertForMaskedLM"),  # the folder's model_type decides the architecture
    ],
)
def test_a_modernbert_folder_gets_modernberts_classes(modernbert_dir, name, cls_name):
    from bertkit import modernbert

    assert model_class(name, modernbert_dir) is getattr(modernbert, cls_name)
