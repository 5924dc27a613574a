"""``bertkit serve`` on ModernBERT folders: every route its head serves answers what transformers' ModernBERT
classes compute on the same random-weight folder.

The reference is the same route on a second server whose model calls (the batcher's) run transformers' model
one sequence at a time, without padding: the tokenisation and the post-processing (pooling, entity grouping,
answer spans) are the route's own, so the two answers differ only where the models do. /fill-mask (which calls
the model directly) and /tokenize / /decode are checked against transformers' model and tokenizer themselves.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import numpy as np
import pytest
import torch
from bpe_folder import build_folder, generated_texts, tiny_modernbert_config

from bertkit import kernels
from bertkit.modernbert import ModernBertForSequenceClassification

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertModel"):
    pytest.skip("this transformers has no ModernBERT", allow_module_level=True)
pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("httpx", reason="TestClient needs httpx (test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from bertkit.serving import create_app  # noqa: E402
from bertkit.serving.quantize import int8_static  # noqa: E402
from bertkit.serving.service import InferenceService  # noqa: E402

MAX_POSITIONS = 96  # small, so that an over-long input is cheap; above the window (16), so the window matters
NER_LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 4: "I-PER"}
HEADS = {
    "encoder": ("ModernBertModel", {}),
    "mlm": ("ModernBertForMaskedLM", {}),
    "cross": ("ModernBertForSequenceClassification", {"num_labels": 1}),
    "classify": ("ModernBertForSequenceClassification", {"id2label": {0: "neg", 1: "mid", 2: "pos"}}),
    "ner": ("ModernBertForTokenClassification", {"id2label": NER_LABELS}),
    "qa": ("ModernBertForQuestionAnswering", {}),
}
TEXTS = generated_texts(7, seed=21) + [" ".join(generated_texts(2, seed=22))]  # 14..80 tokens


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Any]:
    """name -> (folder, transformers model): one folder per head, random weights, one BPE tokenizer."""
    root = tmp_path_factory.mktemp("modernbert-serve")
    build_folder(root / "tokenizer", generated_texts(1500, seed=0), vocab_size=400)
    out = {}
    for name, (cls, extra) in HEADS.items():
        path = root / name
        shutil.copytree(root / "tokenizer", path)
        config = tiny_modernbert_config(path, max_position_embeddings=MAX_POSITIONS, **extra)
        torch.manual_seed(len(out))
        model = getattr(transformers, cls)(config).eval()
        with torch.no_grad():  # sharper attention than the initialisation's: positions and the window matter
            for layer in getattr(model, "model", model).layers:
                layer.attn.Wqkv.weight.mul_(8)
        model.save_pretrained(path)
        out[name] = (path, model)
    return out


def transformers_submit(model: Any, svc: InferenceService) -> Any:
    """A batcher ``submit`` that runs transformers' ``model`` on each sequence alone (no padding)."""
    encoder = getattr(model, "model", model)  # a head's encoder, or the encoder itself

    @torch.inference_mode()
    def submit(task: str, ids: list[list[int]], type_ids: Any = None) -> list[Any]:
        out = []
        for x in ids:
            t = torch.tensor([x])
            if task in ("embed", "hidden"):
                hidden = encoder(t).last_hidden_state
                if task == "hidden":
                    out.append(hidden[0].numpy())
                else:  # the service's pooling (mean for a plain folder) of transformers' states
                    out.append(svc.encoder.sentence_vectors(hidden, torch.ones_like(t))[0].numpy())
            elif task == "span":
                o = model(t)
                out.append((o.start_logits[0].numpy(), o.end_logits[0].numpy()))
            else:  # classify: [labels]; tokens: [T, labels]
                out.append(model(t).logits[0].numpy())
        return out

    return submit


@pytest.fixture(scope="module")
def clients(folders) -> Any:
    """name -> (ours, reference) TestClients; the reference's model calls are transformers'."""
    opened, out = [], {}
    for name, (path, model) in folders.items():
        ref = InferenceService(path)
        ref.batcher.submit = transformers_submit(model, ref)
        pair = (TestClient(create_app(path)), TestClient(create_app(ref)))
        for c in pair:
            c.__enter__()
            opened.append(c)
        out[name] = pair
    yield out
    for c in opened:
        c.__exit__(None, None, None)


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Equal JSON, numbers within 1e-4."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in set(want) - {"seconds"}:  # the time a request took
            assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, abs=1e-4), where
    else:
        assert got == want, where


def both(clients, name: str, path: str, body: dict) -> Any:
    """Our answer to ``body``, checked equal to the reference's; 200 from both."""
    ours, ref = clients[name]
    a, b = ours.post(path, json=body), ref.post(path, json=body)
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert_same(a.json(), b.json(), path)
    return a.json()


ENCODER_ROUTES = [
    ("/embed", {"inputs": TEXTS}),
    ("/embed", {"texts": TEXTS, "normalize": False}),
    ("/v1/embeddings", {"input": TEXTS, "model": "m"}),
    ("/embed_all", {"inputs": TEXTS}),
    ("/similarity", {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}),
    ("/rerank", {"query": TEXTS[0], "texts": TEXTS[1:]}),  # cosine: no cross-encoder head
]


@pytest.mark.parametrize(
    "path, body", ENCODER_ROUTES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(ENCODER_ROUTES)]
)
def test_encoder_routes_equal_transformers(clients, path, body):
    out = both(clients, "encoder", path, body)
    if path == "/embed_all":  # every token's state, longer than the window
        assert max(len(x) for x in out) > 16


def test_info_health_tokenize_decode(clients, folders):
    ours, _ = clients["encoder"]
    info = ours.get("/info").json()
    assert info["architecture"] == "ModernBertModel" and info["max_input_length"] == MAX_POSITIONS
    assert info["endpoints"][-1] == "/rerank" and "/predict" not in info["endpoints"]
    assert ours.get("/health").status_code == 200
    tok = transformers.AutoTokenizer.from_pretrained(folders["encoder"][0])
    for text in TEXTS[:3]:
        got = ours.post("/tokenize", json={"text": text}).json()
        assert got["ids"] == tok(text)["input_ids"]
        assert ours.post("/decode", json={"ids": got["ids"]}).json() == [
            tok.decode(got["ids"], skip_special_tokens=True)
        ]
    rows = ours.post("/tokenize", json={"inputs": TEXTS[:2]}).json()
    assert [[r["id"] for r in row] for row in rows] == [tok(t)["input_ids"] for t in TEXTS[:2]]


def test_a_sentence_transformers_folder_with_modernbert_first(tmp_path, folders):
    """CLS pooling and Normalize from the folder, its max_seq_length the server's limit."""
    path, model = folders["encoder"]
    st = tmp_path / "st"
    shutil.copytree(path, st)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (st / "modules.json").write_text(json.dumps(modules))
    (st / "1_Pooling").mkdir()
    (st / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (st / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    tok = transformers.AutoTokenizer.from_pretrained(st)
    with TestClient(create_app(st)) as client:
        info = client.get("/info").json()
        assert info["architecture"] == "SentenceTransformer" and info["max_input_length"] == 40
        assert info["pooling"] == "cls"
        got = client.post("/embed", json={"texts": TEXTS}).json()["embeddings"]
        # OpenAI's request cannot ask for truncation: the texts under the folder's 40 tokens
        short = [i for i, t in enumerate(TEXTS) if len(tok(t)["input_ids"]) <= 40]
        openai = client.post("/v1/embeddings", json={"input": [TEXTS[i] for i in short]}).json()["data"]
    for i, text in enumerate(TEXTS):
        enc = tok(text, truncation=True, max_length=40, return_tensors="pt")
        with torch.no_grad():
            cls = model(**enc).last_hidden_state[0, 0]
        want = torch.nn.functional.normalize(cls, dim=-1).numpy()
        np.testing.assert_allclose(got[i], want, atol=1e-4)
        if i in short:
            np.testing.assert_allclose(openai[short.index(i)]["embedding"], want, atol=1e-4)
    assert len(short) >= 3


@pytest.mark.parametrize("packing", [True, False], ids=["unpadded", "padded"])
def test_batches_equal_one_at_a_time(clients, packing):
    """One request of texts of mixed lengths (one padded batch: packed into its real tokens with the kernels
    on, run with the mask without) gives each text's vector alone."""
    ours, _ = clients["encoder"]
    before = kernels.set_enabled(packing)
    try:
        together = np.array(ours.post("/embed", json={"texts": TEXTS}).json()["embeddings"])
        states = ours.post("/embed_all", json={"inputs": TEXTS}).json()
    finally:
        kernels.set_enabled(before)
    alone = np.array([ours.post("/embed", json={"texts": [t]}).json()["embeddings"][0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    for text, rows in zip(TEXTS, states):
        np.testing.assert_allclose(rows, ours.post("/embed_all", json={"inputs": text}).json()[0], atol=1e-5)


def test_fill_mask_equals_transformers(clients, folders):
    """ModernBERT's mask token ([MASK], which takes the space before it) from its tokenizer."""
    path, model = folders["mlm"]
    ours, _ = clients["mlm"]
    tok = transformers.AutoTokenizer.from_pretrained(path)
    text = f"the river {tok.mask_token} of the mountain and {tok.mask_token}"
    masks = ours.post("/fill-mask", json={"text": text, "top_k": 4}).json()["masks"]
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        probs = model(**enc).logits[0].softmax(-1)
    positions = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[:, 0]
    assert len(masks) == len(positions) == 2
    for found, pos in zip(masks, positions):
        want = probs[pos]
        fourth = float(want.topk(4).values[-1])
        for cand in found:
            p = float(want[tok.convert_tokens_to_ids(cand["token"])])
            assert cand["score"] == pytest.approx(p, abs=1e-4) and p >= fourth - 1e-4
    bad = ours.post("/fill-mask", json={"text": "no mask here"})
    assert bad.status_code == 422 and tok.mask_token in bad.json()["error"]


def test_sequence_classification_routes_equal_transformers(clients):
    both(clients, "classify", "/predict", {"texts": TEXTS})
    both(clients, "classify", "/predict", {"inputs": TEXTS, "raw_scores": True})
    both(clients, "classify", "/predict", {"texts": TEXTS[:3], "pairs": TEXTS[3:6]})
    both(clients, "cross", "/predict", {"inputs": [[TEXTS[0], t] for t in TEXTS[1:]], "raw_scores": True})
    ours, _ = clients["cross"]
    assert ours.get("/info").json()["rerank"] == "cross-encoder"
    both(clients, "cross", "/rerank", {"query": TEXTS[0], "texts": TEXTS[1:], "raw_scores": True})
    both(clients, "cross", "/rerank", {"query": TEXTS[0], "texts": TEXTS[1:], "return_text": True})


def test_ner_equals_transformers(clients):
    for aggregation in ("first", "simple", "max"):
        both(clients, "ner", "/ner", {"text": TEXTS[-1], "aggregation": aggregation})
    out = both(clients, "ner", "/ner", {"words": TEXTS[-1].split()})
    assert len(out["tags"]) == len(TEXTS[-1].split())


def test_qa_equals_transformers(clients):
    context = TEXTS[-1] + " " + TEXTS[-2]  # longer than one window of the route's 96 tokens
    out = both(clients, "qa", "/qa", {"question": TEXTS[0], "context": context})
    assert out["answer"] == context[out["start"] : out["end"]]  # the context's own characters
    items = [{"question": q, "context": c} for q, c in zip(TEXTS[:3], TEXTS[3:6])]
    both(clients, "qa", "/qa", {"inputs": items, "handle_impossible_answer": True})


@pytest.mark.parametrize(
    "name, path, body",
    [
        ("encoder", "/predict", {"texts": ["a"]}),
        ("encoder", "/fill-mask", {"text": "a [MASK]"}),
        ("mlm", "/ner", {"text": "a"}),
        ("ner", "/qa", {"question": "a", "context": "b"}),
        ("qa", "/predict", {"inputs": "a"}),
    ],
)
def test_a_route_without_its_head_is_404(clients, name, path, body):
    ours, _ = clients[name]
    r = ours.post(path, json=body)
    assert r.status_code == 404 and r.json()["error_type"] == "unsupported"
    assert HEADS[name][0] in r.json()["error"]


def test_over_long_inputs(clients):
    """Past the model's 96 positions: 413 naming the input when truncation is off, else cut to 96 tokens
    (equal to transformers' on the cut ids)."""
    long = " ".join(generated_texts(12, seed=23))
    ours, _ = clients["encoder"]
    assert len(ours.post("/tokenize", json={"text": long}).json()["ids"]) > MAX_POSITIONS
    r = ours.post("/embed", json={"inputs": [TEXTS[0], long], "truncate": False})
    assert (
        r.status_code == 413 and "inputs[1]" in r.json()["error"] and str(MAX_POSITIONS) in r.json()["error"]
    )
    states = both(clients, "encoder", "/embed_all", {"inputs": long, "truncate": True})
    assert len(states[0]) == MAX_POSITIONS
    both(clients, "encoder", "/embed", {"inputs": long, "truncate": True})
    both(clients, "classify", "/predict", {"texts": [long]})
    ours, _ = clients["mlm"]
    r = ours.post("/fill-mask", json={"text": long + " [MASK]"})
    assert r.status_code == 413 and str(MAX_POSITIONS) in r.json()["error"]


def test_int8_serves_modernbert_close_to_float(folders):
    """The int8 copies run (outputs differ from float) and stay within the bound BERT's int8 path keeps:
    cosine of sentence vectors > 0.99, class probabilities within 0.02."""
    path, _ = folders["classify"]
    fp32, q = InferenceService(path), InferenceService(path, int8=True)
    try:
        a, b = fp32.embed(TEXTS, normalize=True)[0], q.embed(TEXTS, normalize=True)[0]
        assert float(np.min(np.sum(a * b, axis=1))) > 0.99
        assert not np.allclose(a, b, atol=1e-6)
        pa, pb = (torch.from_numpy(s.classify_logits(TEXTS)).softmax(-1).numpy() for s in (fp32, q))
        np.testing.assert_allclose(pa, pb, atol=0.02)
        # the served logits are the int8 model's own, called with the mask and positions it expects
        model = int8_static(ModernBertForSequenceClassification.from_pretrained(path), q.int8_engine)
        for text in TEXTS:
            ids = torch.tensor(q.encode([text])[0])
            with torch.no_grad():
                want = model(ids).logits.numpy()
            np.testing.assert_allclose(q.classify_logits([text]), want, atol=1e-5)
    finally:
        fp32.close()
        q.close()


def test_bf16_serves_modernbert_close_to_float(folders):
    """bf16 autocast: the outputs move (bf16 ran) but stay close to fp32's."""
    path, _ = folders["classify"]
    fp32, bf16 = InferenceService(path), InferenceService(path, precision="bf16")
    try:
        assert bf16.info()["precision"] == "bf16"
        a, b = fp32.embed(TEXTS, normalize=True)[0], bf16.embed(TEXTS, normalize=True)[0]
        assert float(np.min(np.sum(a * b, axis=1))) > 0.99
        assert not np.allclose(a, b, atol=1e-6)
        pa, pb = (torch.from_numpy(s.classify_logits(TEXTS)).softmax(-1).numpy() for s in (fp32, bf16))
        np.testing.assert_allclose(pa, pb, atol=0.02)
    finally:
        fp32.close()
        bf16.close()


def test_predict_command_tags_and_answers_as_the_routes_do(tmp_path, clients, folders, capsys):
    """``bertkit predict`` on a ModernBERT tagging or QA folder runs the routes' pipelines."""
    from bertkit.cli import main

    texts = [t.replace("\n", " ").strip() for t in TEXTS[-3:]]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n")
    assert main(["predict", str(folders["ner"][0]), "--input", str(tmp_path / "texts.txt"),
                 "--out", str(tmp_path / "ner.jsonl")]) == 0  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "ner.jsonl").read_text().splitlines()]
    ours, _ = clients["ner"]
    for text, row in zip(texts, rows, strict=True):
        assert_same(row["entities"], ours.post("/ner", json={"text": text}).json()["entities"])
    items = [{"question": q, "context": c} for q, c in zip(texts, TEXTS[:3])]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    assert main(["predict", str(folders["qa"][0]), "--input", str(tmp_path / "qa.jsonl"),
                 "--out", str(tmp_path / "qa.out.jsonl")]) == 0  # fmt: skip
    capsys.readouterr()
    answers = [json.loads(x) for x in (tmp_path / "qa.out.jsonl").read_text().splitlines()]
    ours, _ = clients["qa"]
    for item, got in zip(items, answers, strict=True):
        want = ours.post("/qa", json=item).json()
        assert_same({k: got[k] for k in want}, want)
