"""The CUDA paths, where a GPU is (skipped elsewhere, with the reason): the model on the GPU gives the CPU's
and transformers' outputs, the GPU runs the padded batch (packing is a CPU path) with the reference ops'
outputs and gradients, and training runs in bf16 autocast and in fp16 with a gradient scaler.

CI has no GPU, so these run in a session that is lent one (``pytest tests/test_cuda.py`` there)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit import kernels
from bertkit.config import BertConfig
from bertkit.heads.pretraining import BertForPreTraining
from bertkit.model import BertModel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")

VOCAB = 211
DEVICE = "cuda"


@pytest.fixture(autouse=True)
def exact_fp32():
    """fp32 matmuls in full fp32 (no TF32), so GPU and CPU differ by float rounding only."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _batch(device: str | torch.device = "cpu", seed: int = 0) -> dict[str, torch.Tensor]:
    """Six sequences of lengths 17, 9, 9, 5, 3, 17 padded to 17 (two length groups share lengths), with
    15% of the real tokens as MLM targets and NSP labels."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([17, 9, 9, 5, 3, 17])
    mask = (torch.arange(17)[None] < lengths[:, None]).long()
    ids = torch.randint(5, VOCAB, (6, 17), generator=g) * mask
    labels = torch.where((torch.rand(ids.shape, generator=g) < 0.15) & mask.bool(), ids, -100)
    labels[:, 1] = ids[:, 1]  # at least one target per sequence
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": (torch.arange(17)[None] >= 4).long() * mask,
             "labels": labels, "next_sentence_label": torch.tensor([0, 1, 1, 0, 1, 0])}  # fmt: skip
    return {k: v.to(device) for k, v in batch.items()}


def _config(**kw) -> BertConfig:
    return BertConfig.preset(
        "tiny", vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw
    )


def test_model_on_the_gpu_gives_the_cpus_and_transformers_outputs():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cpu = BertModel(_config()).eval()
    gpu = BertModel(_config()).eval()
    gpu.load_state_dict(cpu.state_dict())
    gpu.to(DEVICE)
    ref = transformers.BertModel(transformers.BertConfig(**_config().to_dict()), add_pooling_layer=True)
    missing, unexpected = ref.load_state_dict(cpu.state_dict(), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing)
    ref = ref.to(DEVICE).eval()
    batch = _batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        want = cpu(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        ids, mask = batch["input_ids"].to(DEVICE), batch["attention_mask"].to(DEVICE)
        got = gpu(ids, attention_mask=mask).last_hidden_state
        theirs = ref(ids, attention_mask=mask).last_hidden_state
    assert got.device.type == DEVICE
    torch.testing.assert_close(got.cpu()[real], want[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(theirs.cpu()[real], want[real], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_the_gpu_runs_the_padded_batch_and_kernels_on_and_off_agree(causal):
    """Packing is a CPU path: on a GPU the padded batch runs with its mask (one attention call per layer, no
    host synchronisation), and the model with its kernels on gives the reference ops' loss and gradients."""
    torch.manual_seed(0)
    model = BertForPreTraining(_config()).to(DEVICE).train()
    batch = _batch(DEVICE)
    assert kernels.packing_for(batch["attention_mask"]) is None
    assert kernels.packing_for(batch["attention_mask"].cpu()) is not None  # the same batch on the CPU packs

    def run():
        model.zero_grad()
        out = model(**batch, causal=causal)
        out.loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    fast, fast_grads = run()
    with kernels.reference_ops():
        ref, ref_grads = run()
    torch.testing.assert_close(fast.loss, ref.loss, rtol=1e-4, atol=1e-5)
    assert fast_grads.keys() == ref_grads.keys()
    for name, g in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], g, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_on_the_gpu_lowers_the_loss_in_mixed_precision(tmp_path, precision):
    import json

    from bertkit.train.simple import adamw_trainer

    torch.manual_seed(0)
    model = BertForPreTraining(_config())
    items = [_batch(seed=s) for s in range(4)]  # the same four batches, again and again: it must fit them
    trainer, steps = adamw_trainer(model, items, 1, lambda xs: xs[0], epochs=15, lr=2e-3, weight_decay=0.0,
                                   warmup_ratio=0.1, seed=0, out_dir=tmp_path, precision=precision,
                                   device=DEVICE, log_every=5, plot=False, progress=False)  # fmt: skip
    assert (trainer.scaler is not None) == (precision == "fp16")  # fp16 needs a loss scaler, bf16 none
    trainer.fit()
    assert trainer.step == steps == 60 and next(model.parameters()).device.type == DEVICE
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first, last = logged[0]["loss"], logged[-1]["loss"]
    assert trainer.nonfinite_steps == 0 and last < 0.7 * first, (first, last)


# ------------------------------------------------------------------------------- the pre-training CLI


@pytest.fixture(scope="module")
def gpu_data_dir(tmp_path_factory):
    from lab.demo import tiny_data

    return tiny_data(tmp_path_factory.mktemp("gpu_data"), max_seq_length=64)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_pretraining_cli_on_the_gpu_resumes_after_sigkill(tmp_path, gpu_data_dir, precision):
    """`bertkit pretrain --device cuda` killed with SIGKILL after step 10 and resumed from its step-8 checkpoint
    logs the uninterrupted run's losses: the CUDA RNG (dropout stays on) and, in fp16, the loss scaler come
    back with the model and optimizer. Exact where the GPU's kernels are deterministic; within 1e-3 here since
    some CUDA backward kernels sum with atomics."""
    import json
    import signal
    import subprocess
    import sys

    from test_pretrain_run import KILLER, env1, inproc, losses, write_config

    cfg = write_config(tmp_path / "cfg.toml")
    common = ["--data", gpu_data_dir, "--config", cfg, "--steps", 14, "--batch-size", 8, "--max-seq-length", 64,
              "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 4, "--eval-every", 5, "--eval-batches", 1,
              "--quiet", "--valid-documents", 2, "--device", DEVICE, "--precision", precision]  # fmt: skip
    inproc(["--out", tmp_path / "ref", *common])
    run = tmp_path / "killed"
    (tmp_path / "killer.py").write_text(KILLER)
    argv = ["pretrain", "--out", run, *common]
    p = subprocess.run([sys.executable, tmp_path / "killer.py", "10", *map(str, argv)], env=env1(),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert losses(run)[-1][0] == 10
    resumed = subprocess.run([sys.executable, "-m", "bertkit", *map(str, argv), "--resume"], env=env1(),
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got, want = losses(run), losses(tmp_path / "ref")
    assert [s for s, _ in got] == [s for s, _ in want] == list(range(1, 15))
    print(f"{precision}: resumed losses bitwise equal: {got == want}")
    for (_, x), (_, y) in zip(got, want):
        assert x == pytest.approx(y, rel=1e-3)
    res = json.loads((run / "results.json").read_text())
    assert res["steps"] == 14 and res["device"].startswith("cuda"), res


# --------------------------------------------------------------------- fine-tuning and serving on the GPU


@pytest.fixture(scope="module")
def gpu_model_dir(tmp_path_factory, gpu_data_dir):
    """A tiny random BertForPreTraining with the test corpus's vocabulary and tokenizer files (HF layout)."""
    from bertkit.pretrain import save_tokenizer

    root = tmp_path_factory.mktemp("gpu_model")
    vocab = gpu_data_dir / "vocab.txt"
    n = sum(1 for _ in vocab.open(encoding="utf-8"))
    torch.manual_seed(0)
    cfg = BertConfig.preset("tiny", vocab_size=n, max_position_embeddings=64)
    BertForPreTraining(cfg).save_pretrained(root / "model")
    save_tokenizer(vocab, True, root / "model")
    return root / "model"


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fine_tuning_cli_trains_on_the_gpu_in_mixed_precision(tmp_path, gpu_model_dir, precision):
    """`bertkit finetune classify` takes the GPU when there is one, runs in bf16 autocast or fp16 with a loss
    scaler, learns a separable toy task and saves a model the CPU loads."""
    import json

    from bertkit.architectures import model_class
    from bertkit.cli import main

    rows = [
        ("good fine great film", "1"),
        ("bad awful poor", "0"),
        ("a fine cast", "1"),
        ("the dull plot", "0"),
    ]
    rows = [(f"{t} {i % 7}", y) for i in range(16) for t, y in rows]
    for name in ("train", "dev"):
        (tmp_path / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    out = tmp_path / "out"
    argv = ["finetune", "classify", "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
            "--model", gpu_model_dir, "--batch-size", 8, "--lr", 2e-3, "--epochs", 6, "--max-seq-length", 16,
            "--quiet", "--precision", precision, "--out", out]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    result = json.loads((out / "metrics.json").read_text())
    assert result["device"].startswith(DEVICE) and result["metrics"]["accuracy"] >= 0.9, result
    saved = Path(result["model_dir"])
    config = BertConfig.from_pretrained(saved)
    model = model_class(config.architectures[0]).from_pretrained(saved)
    assert next(model.parameters()).device.type == "cpu"


def test_serving_on_the_gpu_gives_the_cpus_embeddings_and_fill_mask(gpu_model_dir):
    """The inference service on the GPU (fp32, TF32 off) embeds and fills masks as on the CPU."""
    import numpy as np

    from bertkit.serving.routes.fill_mask import fill_mask
    from bertkit.serving.service import InferenceService

    texts = ["the module defines a class", "return the value of the attribute", "a list"]
    cpu = InferenceService(gpu_model_dir, device="cpu")
    gpu = InferenceService(gpu_model_dir, device=DEVICE)
    try:
        assert gpu.info()["device"].startswith(DEVICE)
        (want_vecs, want_n), (got_vecs, got_n) = cpu.embed(texts), gpu.embed(texts)
        assert got_n == want_n and got_vecs.shape == want_vecs.shape
        np.testing.assert_allclose(got_vecs, want_vecs, rtol=1e-4, atol=1e-5)
        # every token's probability (near-ties in a random model's ranking may order differently)
        masked = f"return the {cpu.tokenizer.mask_token} of the attribute"
        every = len(cpu.tokenizer)
        want = {p["token"]: p["score"] for p in fill_mask(cpu, masked, top_k=every)[0]}
        got = {p["token"]: p["score"] for p in fill_mask(gpu, masked, top_k=every)[0]}
        assert got.keys() == want.keys() and len(got) == every
        assert max(abs(got[t] - want[t]) for t in want) <= 1e-4  # the scores are rounded to 4 decimals
    finally:
        cpu.close()
        gpu.close()
