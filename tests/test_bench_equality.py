"""The benchmarks' equality checks as tests (no timings): what is timed side by side computes the same.

- the encoder's fast paths (packed tokens, attention per equal-length group, oneDNN GEMMs, cached fused
  QKV) against transformers' SDPA BertModel on real variable-length batches;
- fine-tuning: loss, logits and every gradient against transformers' heads;
- the tokenizer's fast ``__call__`` (numpy padding, skipping words past the window) against
  ``BertTokenizerFast`` and the raw library;
- the harness's own checks reject a difference.
"""

from __future__ import annotations

import tempfile

import pytest
import torch

transformers = pytest.importorskip("transformers")

from benchmarks.common import Mismatch, check_close, check_equal  # noqa: E402
from bertkit.config import BertConfig  # noqa: E402
from bertkit.kernels import linear  # noqa: E402
from bertkit.model import ACT2FN, BertModel  # noqa: E402
from bertkit.tokenizer import Tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tok(minilm_dir):
    return Tokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def hf_tok(minilm_dir):
    return transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))


def _real_batch(shared_data, n: int = 12) -> list[str]:
    from benchmarks.inputs import conll_sentences, sst2_sentences

    return sst2_sentences("dev")[: n // 2] + conll_sentences("train")[100 : 100 + n // 2]


def test_encoder_matches_transformers_sdpa_on_real_batches(minilm_dir, shared_data, tok):
    ours = BertModel.from_pretrained(minilm_dir).eval()
    ref = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="sdpa").eval()
    batch = tok(_real_batch(shared_data), max_length=128)
    assert batch["attention_mask"].min() == 0
    with torch.inference_mode():
        for _ in range(2):  # the second call uses the cached fused QKV weight
            a, b = ours(**batch), ref(**batch)
            check_close(a.last_hidden_state, b.last_hidden_state, 1e-4, "hidden", batch["attention_mask"])
            check_close(a.pooler_output, b.pooler_output, 1e-4, "pooler")


def test_fused_qkv_cache_follows_weight_updates(minilm_dir, tok):
    model = BertModel.from_pretrained(minilm_dir).eval()
    batch = tok(["a short one", "and a somewhat longer sentence here"])
    with torch.no_grad():
        before = model(**batch).last_hidden_state
        model.encoder.layer[0].attention.self.query.weight.mul_(0.5)  # in place: bumps the version
        after = model(**batch).last_hidden_state
        fresh = BertModel.from_pretrained(minilm_dir).eval()
        fresh.encoder.layer[0].attention.self.query.weight.mul_(0.5)
        want = fresh(**batch).last_hidden_state
    assert (before - after).abs().max() > 1e-3
    check_close(after, want, 1e-6, "after update", batch["attention_mask"])


def test_arbitrary_masks_and_equal_lengths_group_correctly():
    """Left padding, holes, and runs of equal lengths give what each sequence gives alone."""
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=60)).eval()
    ids = torch.randint(5, 60, (5, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0  # right padding
    mask[1, :3] = 0  # left padding (length 6, same as row 0)
    mask[2, [2, 5]] = 0  # holes
    mask[4, 4:] = 0
    with torch.no_grad():
        out = model(ids, mask).last_hidden_state
        for i in range(5):
            keep = mask[i].bool()
            pos = torch.arange(9)[keep][None]
            alone = model(ids[i : i + 1, keep], position_ids=pos).last_hidden_state[0]
            check_close(out[i, keep], alone, 1e-5, f"row {i}")


def _reference_linear(x, w, b, act):
    out = torch.nn.functional.linear(x, w, b)
    return out if act is None else ACT2FN[act](out)


@pytest.mark.parametrize("out_features", [8, 40])  # narrower and wider than the input: both grad_w layouts
def test_onednn_linear_matches_f_linear_with_gradients(out_features, monkeypatch):
    import bertkit.kernels.gemm as linear_module

    if linear_module.onednn_op() is None:
        pytest.skip("this torch build has no oneDNN linear")
    monkeypatch.setattr(linear_module, "_op", linear_module.onednn_op())  # oneDNN whatever this machine chose
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, requires_grad=True)
    w = torch.randn(out_features, 16, requires_grad=True)
    b = torch.randn(out_features, requires_grad=True)
    g = torch.randn(3, 5, out_features)
    for act in (None, "gelu", "gelu_new"):
        grads = []
        for fn in (linear, _reference_linear):
            for t in (x, w, b):
                t.grad = None
            fn(x, w, b, act).backward(g)
            grads.append([t.grad.clone() for t in (x, w, b)])
        for got, want in zip(*grads):
            check_close(got, want, 1e-5, f"grad {act}")
    with torch.no_grad():
        for act in (None, "gelu", "gelu_new", "relu"):
            check_close(linear(x, w, b, act), _reference_linear(x, w, b, act), 1e-5, f"fused {act}")


@pytest.mark.parametrize("task", ["squad", "sst2"])
def test_finetune_step_matches_transformers(minilm_dir, shared_data, tok, task):
    from benchmarks import bench_finetune as bf

    batch = bf.squad_batch(tok, batch=2, seq=128) if task == "squad" else bf.sst2_batch(tok, batch=4)
    with tempfile.TemporaryDirectory() as tmp:
        ours, ref = bf._pair(task, tmp)
    assert "grad" in bf._check(ours, ref, batch, task)


def test_training_packed_path_matches_padded_gradients():
    """The packed/grouped attention's backward equals a padding-free per-row computation."""
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=60)).eval()
    ids = torch.randint(5, 60, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 4 + [0] * 3])
    model(ids, mask).last_hidden_state[mask.bool()].sum().backward()
    together = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    for i in range(3):
        n = int(mask[i].sum())
        model(ids[i : i + 1, :n]).last_hidden_state.sum().backward()
    for n, p in model.named_parameters():
        if n in together:
            check_close(together[n], p.grad, 1e-4, n)


def _texts(shared_data) -> list[str]:
    from benchmarks.inputs import text_lines

    lines = text_lines(60_000)
    long = " ".join(lines[:40])
    return lines[:200] + [
        long,  # far past the window: the cut path
        "\u200d " * 300 + long,  # 300 words that vanish in normalisation: the fallback path
        "é\u0301 " * 200 + "end",  # accents only, stripped
        "[MASK] " * 150,
        "",
    ]


@pytest.mark.parametrize("max_length", [16, 128])
def test_tokenizer_call_equals_transformers_and_raw(shared_data, minilm_dir, tok, hf_tok, max_length):
    import numpy as np
    import tokenizers

    texts = _texts(shared_data)
    raw = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    raw.enable_truncation(max_length)
    raw.enable_padding(pad_id=tok.pad_token_id, pad_token=tok.pad_token)
    ours = tok(texts, max_length=max_length)
    hf = hf_tok(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    encs = raw.encode_batch(texts)
    for key, attr in (
        ("input_ids", "ids"),
        ("token_type_ids", "type_ids"),
        ("attention_mask", "attention_mask"),
    ):
        check_equal(ours[key], hf[key], key)
        check_equal(ours[key], torch.from_numpy(np.array([getattr(e, attr) for e in encs])), key)
    # An empty second segment is left out here: transformers' batch call keeps it ([CLS] a [SEP] [SEP]) while
    # its single call tok(a, "") and run_classifier.py drop it, as bertkit does (tests/test_tokenizer_inputs.py).
    kept = [(a, b) for a, b in zip(texts, texts[::-1]) if b != ""]
    texts, pairs = [a for a, _ in kept], [b for _, b in kept]
    ours = tok(texts, pairs, max_length=max_length)
    hf = hf_tok(texts, pairs, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    for key in ours:
        check_equal(ours[key], hf[key], f"pairs {key}")


def test_harness_rejects_differences():
    a = torch.zeros(2, 3)
    with pytest.raises(Mismatch):
        check_close(a, a + 1e-3, 1e-4, "x")
    with pytest.raises(Mismatch):
        check_close(a, a * float("nan"), 1e-4, "nan")
    assert check_close(a, a + 1e-3, 1e-4, "masked", mask=torch.zeros(2, 3)) == 0.0
    with pytest.raises(Mismatch):
        check_equal([1, 2], [1, 3], "ids")


def test_onednn_row_buckets_are_few_and_tight():
    """Packed batches change the GEMM row count every batch; buckets bound the shapes oneDNN caches."""
    from bertkit.kernels.gemm import bucket

    sizes = {bucket(n) for n in range(1, 16385)}
    assert len(sizes) <= 150
    assert all(bucket(n) >= n for n in range(1, 5000))
    assert max(bucket(n) / n for n in range(65, 16385)) <= 1.0625


def test_gpu_suite_flops_formula_matches_torch_flop_counter(monkeypatch):
    """The MFU numerator (bertkit.flops.training_flops) equals what torch's FLOP counter sees in
    one forward + backward of our pre-training model (GEMMs, attention, sparse MLM head)."""
    from torch.utils.flop_counter import FlopCounterMode

    import bertkit.kernels.gemm as linear_module
    from benchmarks.bench_pretrain import make_batch
    from bertkit.flops import training_flops
    from bertkit.heads.pretraining import BertForPreTraining

    monkeypatch.setattr(linear_module, "_op", None)  # F.linear: GEMMs the counter knows, no padded rows
    cfg = BertConfig.preset("tiny", vocab_size=1100)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)
    batch = make_batch(cfg.vocab_size, batch=4, seq=24, seed=3)
    batch["attention_mask"][:] = 1  # every sequence full length: rows are exactly the real tokens
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    masked = int((batch["labels"] != -100).sum())
    assert counter.get_total_flops() == pytest.approx(training_flops(cfg, [24] * 4, masked), rel=1e-9)


def test_pretrain_bench_pair_agrees_under_bf16_autocast():
    """The GPU suite's step (bf16 autocast) on CPU: our model and transformers', same weights and batch,
    give nearly the same loss (eval mode: no dropout), and the fp32 check inside holds."""
    from benchmarks.bench_pretrain import _step, build_pair
    from bertkit.train.optim import build_optimizer

    ours, theirs, batch, check = build_pair("tiny", batch_size=4, seq=32)
    assert check["max_logit_diff"] < 1e-3

    def loss(model, precision):  # lr 0: the step leaves the weights as they were
        return float(_step(model, build_optimizer(model, "adamw", lr=0.0), batch, precision=precision))

    bf16 = [loss(m, "bf16") for m in (ours, theirs)]
    assert abs(bf16[0] - bf16[1]) < 0.02 * abs(bf16[1]), bf16
    assert bf16[0] != loss(ours, "fp32")  # autocast was in effect


def test_child_json_reads_the_last_line_drops_variables_and_reports_a_failure(monkeypatch):
    from benchmarks.common import child_json

    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    monkeypatch.setenv("KEEP_ME", "1")
    code = "import json, os; print('noise'); print(json.dumps(sorted(k for k in os.environ if k in ('MALLOC_ARENA_MAX', 'KEEP_ME'))))"
    # the child prints a list: child_json returns whatever JSON the last line holds
    assert child_json(["-c", code], drop_env=("MALLOC_*",)) == ["KEEP_ME"]
    with pytest.raises(RuntimeError, match="boom"):
        child_json(["-c", "import sys; sys.exit('boom')"])


def test_the_pretraining_bench_gives_each_row_as_soon_as_it_is_measured(monkeypatch):
    """`python -m benchmarks.bench_pretrain` prints rows one by one, so a run stopped by a time limit keeps the
    rows it finished (a GPU host's CPU run once lost all of them): the first row comes before the second size
    is measured."""
    pytest.importorskip("transformers")
    from benchmarks import bench_pretrain

    measured = []
    monkeypatch.setattr(
        bench_pretrain, "bench_size", lambda size, *a, **k: measured.append(size) or {"name": size}
    )
    rows = bench_pretrain.run({"sizes": ["mini", "small"], "ours_only_sizes": []})
    assert next(rows) == {"name": "mini"} and measured == ["mini"]
    assert next(rows) == {"name": "small"} and measured == ["mini", "small"]


def _tiny_modernbert(**overrides):
    from benchmarks.bench_modernbert import base_config

    if not hasattr(transformers, "ModernBertModel"):
        pytest.skip("this transformers has no ModernBERT")
    # ModernBERT-base's layout at a tiny width: layer 0 global, 1 and 2 local with a 16-token window
    tiny = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, local_attention=16)
    return base_config(3, **tiny, **overrides)


def test_modernbert_bench_pairs_agree_and_a_difference_is_caught():
    """What the ModernBERT suite times computes the same on both sides: padded batches and a document longer
    than the window (hidden states), and the MLM step (loss, every gradient); a changed weight is caught."""
    from benchmarks.bench_modernbert import (
        build_pair,
        check_hidden,
        check_step,
        document,
        mlm_batch,
        synthetic_batches,
    )

    cfg = _tiny_modernbert()
    ours, ref = build_pair(cfg)
    batches = synthetic_batches("conll", 2)
    assert batches[0]["attention_mask"].min() == 0 and batches[0]["input_ids"].shape[1] > 16
    assert check_hidden(ours, ref, [*batches, document(300)], "tiny") <= 1e-4
    mlm, mlm_ref = build_pair(cfg, "ModernBertForMaskedLM")
    check = check_step(mlm, mlm_ref, mlm_batch(cfg.vocab_size, 4, 48))
    assert check["max_grad_diff"] <= 1e-4
    with torch.no_grad():
        ours.final_norm.weight.mul_(1.01)
    with pytest.raises(Mismatch):
        check_hidden(ours, ref, batches[:1], "changed")


def test_the_modernbert_suite_runs_only_the_kinds_of_row_asked_for(monkeypatch):
    """``modernbert.rows`` picks the kinds of row (to finish a run that stopped at its time limit); an unknown
    kind is refused before anything is measured."""
    from types import SimpleNamespace

    from benchmarks import bench_modernbert as bm

    if not hasattr(transformers, "ModernBertModel"):
        pytest.skip("this transformers has no ModernBERT")
    ran = []
    monkeypatch.setattr(bm, "bench_batches", lambda c, d, *a: ran.append(d) or {"name": d})
    monkeypatch.setattr(bm, "bench_document", lambda c, n, *a: ran.append(n) or {"name": n})
    monkeypatch.setattr(bm, "bench_pretrain_step", lambda c, b, s, *a: ran.append("step") or {"name": "step"})
    rows = list(bm.run(SimpleNamespace(rows=["documents", "step"], documents=[8192], layers=1)))
    assert [r["name"] for r in rows] == ran == [8192, "step"]
    ran.clear()
    assert [r["name"] for r in bm.run(SimpleNamespace(layers=1, documents=[64]))] == [
        "sst2",
        "conll",
        64,
        "step",
    ]
    with pytest.raises(ValueError, match=r"modernbert.rows: unknown \['doc'\]"):
        list(bm.run(SimpleNamespace(rows=["doc"])))


def test_modernbert_flops_formula_matches_torch_flop_counter():
    """``modernbert_flops`` (the suite's model FLOPs) equals torch's FLOP counter over transformers' forward
    of a sequence inside the window (there local attention is dense; eager attention: matmuls the counter
    sees)."""
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.bench_modernbert import build_pair, document, modernbert_flops

    cfg = _tiny_modernbert(attn_implementation="eager")
    _, ref = build_pair(cfg)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        ref(**document(16))
    assert counter.get_total_flops() == pytest.approx(modernbert_flops(cfg, [16]), rel=1e-9)


def test_electra_flops_formula_matches_torch_flop_counter(monkeypatch):
    """The ELECTRA rows' numerator (bertkit.flops.electra_training_flops) equals what torch's FLOP counter sees
    in one forward + backward of our ELECTRA pair: both encoders, the projection to the generator's width, the
    discriminator's head on every token, the generator's head and decoder on the masked rows only."""
    from torch.utils.flop_counter import FlopCounterMode

    import bertkit.kernels.gemm as linear_module
    from benchmarks.bench_electra import STEP_KEYS
    from benchmarks.bench_pretrain import make_batch
    from bertkit.electra import ElectraPretrainingModel
    from bertkit.flops import electra_training_flops

    monkeypatch.setattr(linear_module, "_op", None)  # F.linear: GEMMs the counter knows, no padded rows
    cfg = BertConfig.preset("tiny", vocab_size=1100)
    torch.manual_seed(0)
    model = ElectraPretrainingModel(cfg, generator_fraction=0.5)
    batch = {k: v for k, v in make_batch(cfg.vocab_size, batch=4, seq=24, seed=3).items() if k in STEP_KEYS}
    batch["attention_mask"][:] = 1  # every sequence full length: rows are exactly the real tokens
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    masked = int((batch["labels"] != -100).sum())
    expected = electra_training_flops(cfg, model.generator_config, [24] * 4, masked)
    # the discriminator's BERT pooler runs forward (the saved encoder keeps it) but no loss reads it: not model work
    pooler = sum(counter.get_flop_counts()["ElectraPretrainingModel.discriminator.pooler"].values())
    assert pooler == 4 * 2 * cfg.hidden_size**2
    assert counter.get_total_flops() - pooler == pytest.approx(expected, rel=1e-9)


def test_electra_bench_pair_agrees_steps_and_a_difference_is_caught():
    """The ELECTRA suite's two sides start from the same weights (transformers loads our ELECTRA folders) and
    give the same generator and discriminator logits; each side's step trains (its loss is finite and its
    weights move, the shared embeddings included); a changed weight on either network is caught."""
    from benchmarks.bench_electra import _step, build_pair, check_pair
    from bertkit.train.optim import build_optimizer

    ours, theirs, batch, check = build_pair("tiny", batch_size=4, seq=32, vocab_size=1100)
    assert max(check.values()) <= 1e-4
    shared = theirs.generator.electra.embeddings.word_embeddings.weight
    assert shared is theirs.discriminator.electra.embeddings.word_embeddings.weight
    assert theirs.generator.generator_lm_head.weight is shared
    for model in (ours, theirs):
        model.train()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        loss = _step(model, build_optimizer(model, "adamw", lr=1e-3), batch)
        assert torch.isfinite(loss)
        moved = [n for n, p in model.named_parameters() if not torch.equal(before[n], p)]
        assert any("word_embeddings" in n for n in moved) and len(moved) > len(before) // 2
    ours, theirs, batch, _ = build_pair("tiny", batch_size=4, seq=32, vocab_size=1100)
    for network in (theirs.generator, theirs.discriminator):
        weight = network.electra.encoder.layer[0].output.dense.weight
        kept = weight.detach().clone()
        with torch.no_grad():  # one output row only: a shift of every row alike would vanish in the LayerNorm
            weight[0].add_(0.05)
        with pytest.raises(AssertionError, match="outputs differ"):
            check_pair(ours, theirs, batch, "changed")
        with torch.no_grad():
            weight.copy_(kept)
    assert max(check_pair(ours, theirs, batch, "restored").values()) <= 1e-4


def test_the_electra_suite_gives_a_row_with_its_work_and_the_check():
    """One row per size as it is measured, naming the reference and carrying the FLOPs the fraction of the
    peak is computed from (ours counts real tokens and masked rows; the reference's work is every position)."""
    from benchmarks.bench_electra import run

    rows = list(run({"sizes": ["tiny"], "repeats": 1, "warmup": 0, "batch_size": 4, "seq": 16, "mixed": []}))
    assert len(rows) == 1
    row = rows[0]
    assert row["name"].startswith("ELECTRA step BERT-tiny (4x16") and row["ratio"] > 0
    assert "ElectraForPreTraining" in row["reference_impl"]
    assert 0 < row["model_flops_per_call"] < row["ref_work_flops_per_call"]
    assert row["max_generator_logit_diff"] <= 1e-4
    tiny = BertConfig.preset("tiny")  # the largest GEMM, for make bench's below-half-the-peak line
    assert row["gemm_shape"] == [sum(row["lengths"]), tiny.hidden_size, tiny.intermediate_size]


def test_paired_rows_run_fp32_then_the_asked_bf16_kinds_per_size(monkeypatch):
    """The pre-training and ELECTRA suites share their row order: every size in fp32, then per size "auto"
    (ours auto against the reference in fp32) and "bf16" (both sides), only on a CPU with native bf16."""
    import argparse

    from benchmarks import common

    calls = []

    def bench(size, **kw):
        calls.append((size, kw.get("precision", "fp32"), kw.get("ref_precision")))
        return {"name": size}

    ns = argparse.Namespace(sizes=["a", "b"], repeats=1, warmup=0, threads=None, batch_size=2, seq=8,
                            mixed=["auto", "bf16"])  # fmt: skip
    for native in (True, False):
        monkeypatch.setattr(common, "bf16_supported", lambda native=native: native)
        calls.clear()
        assert len(list(common.paired_rows(bench, ns, "step"))) == (6 if native else 2)
        assert calls[:2] == [("a", "fp32", None), ("b", "fp32", None)]
        assert calls[2:] == ([("a", "auto", "fp32"), ("a", "bf16", None), ("b", "auto", "fp32"), ("b", "bf16", None)]
                             if native else [])  # fmt: skip
