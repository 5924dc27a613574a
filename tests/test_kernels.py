"""bertkit.kernels: the model with its kernels off (plain PyTorch ops) and on gives the same outputs and
gradients; model.py reaches the kernels only through their named calls; the per-machine choice is
measured once, cached, overridable."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertkit import kernels, settings, tuning
from bertkit.config import BertConfig
from bertkit.heads.pretraining import BertForPreTraining
from bertkit.kernels import gemm

ROOT = Path(__file__).resolve().parents[1]


def _batch(vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Four sequences of lengths 9, 5, 5, 3 (padded to 9; two share a length), MLM labels and NSP labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (4, 9), generator=g)
    mask = (torch.arange(9)[None] < torch.tensor([9, 5, 5, 3])[:, None]).long()
    ids[mask == 0] = 0
    types = (torch.arange(9)[None] >= 2).long() * mask
    labels = torch.full_like(ids, -100)
    labels[:, 1] = ids[:, 1]
    labels[0, 6] = ids[0, 6]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": types,
        "labels": labels,
        "next_sentence_label": torch.tensor([0, 1, 1, 0]),
    }


def _run(model, batch, causal: bool):
    model.zero_grad()
    out = model(**batch, output_hidden_states=True, causal=causal)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


@pytest.fixture(params=["onednn", "onednn_fwd", "torch"])
def backend(request):
    if request.param != "torch" and gemm.onednn_op() is None:
        pytest.skip("this torch build has no oneDNN linear")
    gemm.use_backend(request.param)
    yield request.param
    gemm.use_backend(None)


def test_packed_rows_round_up_only_for_autograd_or_onednn(backend):
    mask = _batch(97)["attention_mask"]  # 22 real tokens
    assert gemm.bucket(22) == 32
    packing = kernels.packing_for(mask)
    assert (packing.tokens, packing.rows.numel()) == (22, 32)  # autograd on: a few shapes for the allocator
    with torch.inference_mode():  # inference: exact rows, unless oneDNN pads them anyway
        assert kernels.packing_for(mask).rows.numel() == (32 if backend != "torch" else 22)


@pytest.mark.parametrize("causal", [False, True])
def test_kernels_off_and_on_give_equal_outputs_and_gradients(backend, causal):
    # dropout 0 in training mode: the two dropouts draw different masks, everything else runs as in training
    cfg = BertConfig.preset("tiny", vocab_size=97, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg).train()
    batch = _batch(cfg.vocab_size)
    assert kernels.packing_for(batch["attention_mask"]) is not None  # the kernels path packs this batch
    fast, fast_grads = _run(model, batch, causal)
    with kernels.reference_ops():
        assert kernels.packing_for(batch["attention_mask"]) is None
        ref, ref_grads = _run(model, batch, causal)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(fast.loss, ref.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.prediction_logits, ref.prediction_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        fast.seq_relationship_logits, ref.seq_relationship_logits, rtol=1e-5, atol=1e-5
    )
    for a, b in zip(fast.hidden_states, ref.hidden_states):
        torch.testing.assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)
    assert fast_grads.keys() == ref_grads.keys() and len(ref_grads) == len(list(model.parameters()))
    for name, g in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], g, rtol=1e-4, atol=1e-6, msg=name)
    assert kernels.enabled()  # the block restored the switch


def test_reference_ops_are_torch_ops():
    """Inside reference_ops dropout is F.dropout (same draws for the same seed), linear is F.linear and
    attention is SDPA, whatever this machine chose."""
    x = torch.randn(6, 40)
    w, b = torch.randn(24, 40), torch.randn(24)
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    with kernels.reference_ops():
        torch.manual_seed(3)
        dropped = kernels.dropout(x, 0.3, True)
        torch.manual_seed(3)
        assert torch.equal(dropped, F.dropout(x, 0.3, True))
        assert torch.equal(kernels.linear(x, w, b, act="gelu"), F.gelu(F.linear(x, w, b)))
        torch.manual_seed(4)
        got = kernels.scaled_dot_product_attention(q, k, v, None, True, 0.2)
        torch.manual_seed(4)
        assert torch.equal(got, F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True))
    torch.manual_seed(3)
    assert not torch.equal(kernels.dropout(x, 0.3, True), dropped)  # the kernels' own mask is another draw


def test_linear_module_is_an_nn_linear_computed_by_the_kernel(monkeypatch):
    """kernels.Linear keeps nn.Linear's parameters (checkpoints unchanged), computes act(x W^T + b) through
    kernels.linear, and refuses an activation the kernel does not know."""
    torch.manual_seed(0)
    m = kernels.Linear(40, 24, act="gelu")
    assert isinstance(m, torch.nn.Linear) and list(m.state_dict()) == ["weight", "bias"]
    x = torch.randn(3, 5, 40)
    with kernels.reference_ops():
        assert torch.equal(m(x), F.gelu(F.linear(x, m.weight, m.bias)))
    calls = []
    monkeypatch.setattr(gemm, "linear", lambda *a, **k: calls.append(k) or torch.zeros(1))
    m(x)
    assert calls == [{"act": "gelu"}]
    with pytest.raises(ValueError, match="act must be one of"):
        kernels.Linear(4, 4, act="swish")


def test_the_models_read_their_modules():
    """Every projection of BERT's and ModernBERT's encoders (and ModernBERT's MLM head) is a kernels.Linear,
    called as a module: neither model file hands a module's weight to a kernel."""
    from bertkit.modernbert import ModernBertConfig, ModernBertForMaskedLM

    bert = BertForPreTraining(BertConfig.preset("tiny", vocab_size=50, num_hidden_layers=1)).bert
    special = dict(pad_token_id=0, bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2)
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48)
    modern = ModernBertForMaskedLM(ModernBertConfig(vocab_size=50, **special, **small))
    for model in (bert, modern):
        dense = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert dense and all(isinstance(m, kernels.Linear) for m in dense)
    for name in ("model.py", "modernbert.py"):
        assert "linear(" not in (ROOT / "bertkit" / name).read_text(encoding="utf-8"), name


def test_model_py_uses_only_the_kernels_named_calls():
    tree = ast.parse((ROOT / "bertkit" / "model.py").read_text(encoding="utf-8"))
    named = set(kernels.__all__)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "kernels" in node.module:
            assert node.module == "kernels" and node.level == 1, f"model.py imports {node.module}"
            assert {a.name for a in node.names} <= named
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "kernels"
        ):
            assert node.attr in named, f"model.py uses kernels.{node.attr}"
        if isinstance(node, ast.Attribute) and node.attr in ("ops", "mkldnn"):
            raise AssertionError("model.py calls a vendor op directly")


# ------------------------------------------------------------------------------------ per-machine choice


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BERTKIT_CHOICE_CACHE", raising=False)
    return tmp_path / "kernels.json"


def test_choice_is_measured_once_then_cached(cache, caplog):
    calls = []

    def measure():
        calls.append(1)
        return "b", {"a_ms": 2.0, "b_ms": 1.0}

    with caplog.at_level("INFO", logger="bertkit"):
        assert tuning.choose("thing", measure) == "b"
    assert "kernel choice thing=b" in caplog.text  # the choice is logged
    assert tuning.choose("thing", measure) == "b"
    assert len(calls) == 1
    data = json.loads(cache.read_text())
    (key,) = data
    assert (
        key == tuning.machine_key()
        and torch.__version__ in key
        and f"{torch.get_num_threads()} threads" in key
    )
    assert data[key]["thing"]["choice"] == "b" and data[key]["thing"]["details"]["b_ms"] == 1.0
    old = torch.get_num_threads()
    torch.set_num_threads(old + 1)  # another thread count is another machine setting: measured again
    try:
        assert tuning.choose("thing", measure) == "b" and len(calls) == 2
    finally:
        torch.set_num_threads(old)


def test_choice_env_override_and_bad_cache(cache, monkeypatch):
    def measure():
        raise AssertionError("the override must not measure")

    thing = settings.Setting("BERTKIT_THING", settings.flag_choice("torch", "onednn"))
    monkeypatch.setenv("BERTKIT_THING", "0")
    assert tuning.choose("thing", measure, override=thing) == "torch"
    assert not cache.exists()
    monkeypatch.delenv("BERTKIT_THING")
    cache.write_text("{not json")  # a damaged cache is measured over, not trusted
    assert tuning.choose("thing", lambda: ("x", {})) == "x"
    assert json.loads(cache.read_text())[tuning.machine_key()]["thing"]["choice"] == "x"


def test_choice_survives_an_unwritable_cache(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(blocker / "sub"))  # a directory under a file: cannot exist
    with caplog.at_level("WARNING", logger="bertkit"):
        assert tuning.choose("thing", lambda: ("y", {})) == "y"
    assert "could not cache" in caplog.text


def test_linear_choice_measures_both_backends(cache, monkeypatch):
    monkeypatch.delenv("BERTKIT_ONEDNN", raising=False)
    monkeypatch.setattr(gemm, "MEASURE_SHAPES", ((16, 32, 64), (16, 64, 32)))  # small: the logic, not speed
    picked = gemm.choose_linear()
    assert picked in gemm.BACKENDS
    entry = tuning.cached_choices()["linear"]
    if gemm.onednn_op() is not None:  # both timed on this machine, forward and backward apart
        assert set(entry["details"]["ms"]["16x32->64"]) == {
            "fwd_onednn",
            "fwd_torch",
            "bwd_onednn",
            "bwd_torch",
        }
    monkeypatch.setenv("BERTKIT_ONEDNN", "0")
    assert gemm.choose_linear() == "torch"


def test_tokenizer_fast_path_is_chosen_per_machine(cache, monkeypatch):
    from bertkit.tokenizer import Tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ",", "."]
    monkeypatch.delenv("BERTKIT_TOKENIZER_FAST_PATH", raising=False)
    tok = Tokenizer.from_vocab(vocab)
    ids = tok.encode("The cat sat on the mat.").ids  # the first use measures
    entry = tuning.cached_choices()["tokenizer_fast_path"]
    assert {"fast", "full"} <= set(entry["details"]) and tok.fast_path == (entry["choice"] == "on")
    monkeypatch.setenv("BERTKIT_TOKENIZER_FAST_PATH", "0")
    off = Tokenizer.from_vocab(vocab)
    assert off.fast_path is False and off.encode("The cat sat on the mat.").ids == ids
    off.fast_path = True  # an explicit setting wins
    assert off.fast_path is True


def test_first_use_inside_inference_mode_measures_with_autograd(cache, monkeypatch):
    """The GEMM choice may be made by the first forward of a server, under inference_mode."""
    monkeypatch.delenv("BERTKIT_ONEDNN", raising=False)
    gemm.use_backend(None)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=50)).bert.eval()
    try:
        with torch.inference_mode():
            out = model(torch.randint(5, 50, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2]))
    finally:
        gemm.use_backend(None)
    assert out.last_hidden_state.shape == (2, 6, 128) and "linear" in tuning.cached_choices()


def test_omp_wait_policy_sleeps_only_on_a_saturated_machine():
    assert tuning.omp_wait_policy(2.0, 2) == "PASSIVE" and tuning.omp_wait_policy(17.5, 2) == "PASSIVE"
    assert tuning.omp_wait_policy(1.9, 2) is None and tuning.omp_wait_policy(0.0, 1) is None


@pytest.mark.parametrize(
    "entry, status",
    [
        # `python -m bertkit` and `python -m bertkit.retrieval` without arguments: usage, exit status 2
        ("runpy.run_module('bertkit', run_name='__main__', alter_sys=True)", 2),
        ("runpy.run_module('bertkit.retrieval', run_name='__main__', alter_sys=True)", 2),
        ("import benchmarks", 0),  # every `python -m benchmarks.NAME`
    ],
    ids=["bertkit", "bertkit.retrieval", "benchmarks"],
)
def test_the_commands_set_the_thread_settings_as_for_the_bench(entry, status):
    import os
    import subprocess
    import sys

    # a fake load average, seen by bertkit.tuning through os.getloadavg, before the entry point runs; what it
    # left is printed at exit
    code = (
        "import atexit, os, runpy; os.getloadavg = lambda: ({load}, 0.0, 0.0); os.cpu_count = lambda: 2; "
        "atexit.register(lambda: print('POLICY', os.environ.get('OMP_WAIT_POLICY'))); {first}"
    ) + entry
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {"PYTHONPATH": str(ROOT)}

    def run(load: float, first: str = "", **extra: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", code.format(first=first, load=load)],
            env=env | extra,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert out.returncode == status, out.stderr
        return out.stdout.strip().splitlines()[-1]

    assert run(3.0) == "POLICY PASSIVE"  # a saturated machine, before torch starts: idle threads sleep
    assert run(0.5) == "POLICY None"  # an idle one: OpenMP's default spinning
    assert run(3.0, OMP_WAIT_POLICY="ACTIVE") == "POLICY ACTIVE"  # the user's own setting wins
    assert run(3.0, first="import torch; ") == "POLICY None"  # too late once torch runs: left alone


def test_a_resume_takes_the_checkpoints_gemm_backend_unless_the_user_pinned_one(monkeypatch, caplog):
    if gemm.onednn_op() is None:
        pytest.skip("this torch build has no oneDNN linear: one backend only")
    monkeypatch.delenv("BERTKIT_ONEDNN", raising=False)
    try:
        gemm.use_backend("onednn")
        gemm.resume_backend(None)  # a checkpoint from before the backend was recorded: the machine's choice
        gemm.resume_backend("nosuch")
        assert gemm.backend_name() == "onednn"
        with caplog.at_level("INFO", logger="bertkit"):
            gemm.resume_backend("torch")
        assert gemm.backend_name() == "torch" and "as the checkpoint was written" in caplog.text
        monkeypatch.setenv("BERTKIT_ONEDNN", "1")  # the user's explicit setting wins, with a warning
        gemm.use_backend("onednn")
        caplog.clear()
        with caplog.at_level("WARNING", logger="bertkit"):
            gemm.resume_backend("torch")
        assert gemm.backend_name() == "onednn" and "not bitwise" in caplog.text
    finally:
        gemm.use_backend(None)
