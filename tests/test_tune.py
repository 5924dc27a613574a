"""``bertkit tune``: the per-machine choices made as an explicit, recorded step; a training run records the
choices it computed with and a resume takes them back instead of choosing again."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from bertkit import tuning
from bertkit.cli import main
from bertkit.kernels import attention, gemm
from bertkit.train import Trainer, build_optimizer, latest_checkpoint
from bertkit.train import loop as train_loop


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    for name in (
        "BERTKIT_CHOICE_CACHE",
        "BERTKIT_ONEDNN",
        "BERTKIT_TOKENIZER_FAST_PATH",
        "BERTKIT_PRECISION",
        "BERTKIT_BF16_ATTENTION",
    ):
        monkeypatch.delenv(name, raising=False)
    gemm.use_backend(None)
    attention.use_bf16_attention(None)
    yield tmp_path / "cache" / "kernels.json"
    gemm.use_backend(None)
    attention.use_bf16_attention(None)


def tune(capsys, *args: str) -> dict:
    assert main(["tune", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_tune_measures_records_and_keeps_what_is_recorded(cache, capsys, monkeypatch):
    shown = tune(capsys, "--show")
    assert shown["choices"] == {} and not cache.exists()  # --show measures nothing
    made = tune(capsys)
    assert set(made["choices"]) == {"linear", "bf16_attention", "tokenizer_fast_path"}
    assert made["sources"] == dict.fromkeys(made["choices"], "measured")
    assert made["choices"]["bf16_attention"] in ("bf16", "fp32")
    assert made["machine"] == tuning.machine_key() and made["cache"] == str(cache)
    recorded = json.loads(cache.read_text())[tuning.machine_key()]
    assert {k: v["choice"] for k, v in recorded.items()} == made["choices"]
    assert tune(capsys, "--show")["choices"] == made["choices"]

    def measured_again() -> tuple[str, dict]:
        raise AssertionError("a recorded choice is not measured again without --force")

    monkeypatch.setattr(gemm, "_measure_linear", measured_again)
    again = tune(capsys)
    assert again["sources"]["linear"] == "cache" and again["choices"] == made["choices"]
    other = "torch" if made["choices"]["linear"] == "onednn" else "onednn"
    monkeypatch.setattr(gemm, "_measure_linear", lambda: (other, {"reason": "a fake measurement"}))
    forced = tune(capsys, "--force")
    assert forced["sources"]["linear"] == "measured" and forced["choices"]["linear"] == other
    assert tuning.recorded_choice("linear") == other


def test_tune_names_an_override_and_refuses_a_disabled_cache(cache, capsys, monkeypatch):
    monkeypatch.setenv("BERTKIT_ONEDNN", "0")
    made = tune(capsys)
    assert made["choices"]["linear"] == "torch"
    assert made["sources"]["linear"] == "environment (BERTKIT_ONEDNN=0)"
    monkeypatch.setenv("BERTKIT_CHOICE_CACHE", "0")
    assert main(["tune"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit tune: error: BERTKIT_CHOICE_CACHE=0 turns the choice cache off")
    assert len(err.splitlines()) == 1
    assert tuning.recorded_choice("linear") is None  # a disabled cache records nothing either


def test_a_resume_warns_when_this_machines_recorded_choice_disagrees(cache, monkeypatch, caplog):
    def measured() -> tuple[str, dict]:
        raise AssertionError("a resume does not measure")

    tuning.choose("linear", lambda: ("onednn", {}))  # this machine recorded oneDNN
    monkeypatch.setattr(gemm, "_measure_linear", measured)
    with caplog.at_level("INFO", logger="bertkit"):
        gemm.resume_backend("torch")
    assert gemm.backend_name() == "torch"
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "this machine's recorded choice" in warning.getMessage() and "\n" not in warning.getMessage()


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        return {"loss": ((self.lin(x) - y) ** 2).mean()}


def toy_trainer(out, steps: int, model_class: type[nn.Module] = Toy) -> Trainer:
    torch.manual_seed(0)
    model = model_class()
    g = torch.Generator().manual_seed(1)
    batches = [
        {"x": torch.randn(8, 4, generator=g), "y": torch.randn(8, 1, generator=g)} for _ in range(steps)
    ]
    return Trainer(
        model, build_optimizer(model, "adamw", lr=1e-2), train_batches=batches, out_dir=out, max_steps=steps,
        precision="auto", checkpoint_every=2, progress=False, plot=False,
    )  # fmt: skip


def test_checkpoints_record_the_choices_and_a_resume_takes_the_precision_back(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_PRECISION", "bf16")  # what `auto` resolved to in the first run
    summary = toy_trainer(tmp_path / "run", 2).fit()
    _, state = latest_checkpoint(tmp_path / "run")
    assert state["choices"] == {"linear": gemm.backend_name(), "precision": "bf16", "bf16_attention": None}
    assert summary["choices"] == state["choices"]
    monkeypatch.delenv("BERTKIT_PRECISION")

    def chosen_again(*args, **kwargs) -> str:
        raise AssertionError("a resumed run takes its recorded precision")

    monkeypatch.setattr(train_loop, "choose_precision", chosen_again)
    resumed = toy_trainer(tmp_path / "run", 4)
    summary = resumed.fit(resume=True)
    assert resumed.precision == "bf16" and summary["steps"] == 4


def test_a_pinned_precision_wins_over_the_recorded_one_with_a_warning(monkeypatch, caplog):
    from bertkit.train.precision import resume_precision

    assert resume_precision(None) is None and resume_precision("fp16") is None  # nothing usable recorded
    assert resume_precision("fp32") == "fp32"
    monkeypatch.setenv("BERTKIT_PRECISION", "bf16")
    with caplog.at_level("WARNING", logger="bertkit"):
        assert resume_precision("fp32") == "bf16"
    assert "not bitwise" in caplog.text


def test_tune_records_for_the_thread_count_a_run_uses(cache, capsys):
    old = torch.get_num_threads()
    try:
        made = tune(capsys, "--num-threads", str(old + 1))
        assert f"|{old + 1} threads|" in made["machine"]
        assert json.loads(cache.read_text()).keys() == {made["machine"]}  # not this process's own count
    finally:
        torch.set_num_threads(old)
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--num-threads", "0"])
    assert exit_.value.code == 2 and "--num-threads: 0 must be a positive integer" in capsys.readouterr().err


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(
        torch.randn(2, 2, 16, 8, generator=g).bfloat16().to(dtype).requires_grad_() for _ in range(3)
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16-inputs", "fp32-inputs"])
@pytest.mark.parametrize("choice", ["bf16", "fp32"])
def test_bf16_attention_runs_as_chosen_under_autocast(choice, dtype, monkeypatch):
    """Attention that bf16 autocast would run in bf16 (bf16 inputs, or fp32 ones it casts down, as
    ModernBERT's rotated queries and keys): "fp32" casts q, k, v up and runs SDPA in fp32 with autocast off,
    the output cast to bf16; "bf16" is SDPA under autocast. Bit for bit the op each names, forward and
    gradients, with the choice pinned in the environment (nothing measured)."""
    import torch.nn.functional as F

    monkeypatch.setenv("BERTKIT_BF16_ATTENTION", choice)
    mask = torch.ones(2, 1, 1, 16, dtype=torch.bool)
    mask[1, ..., 10:] = False
    q, k, v = _qkv(dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = attention.scaled_dot_product_attention(q, k, v, mask)
    ours.float().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    q2, k2, v2 = _qkv(dtype)
    if choice == "fp32":
        want = F.scaled_dot_product_attention(q2.float(), k2.float(), v2.float(), attn_mask=mask).bfloat16()
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=mask)
    want.float().sum().backward()
    assert ours.dtype == torch.bfloat16 and torch.equal(ours, want)
    assert all(torch.equal(a, b.grad) for a, b in zip(grads, (q2, k2, v2), strict=True))
    assert attention.bf16_attention() == choice


def test_bf16_attention_is_measured_once_cached_and_pinned_by_a_resume(cache, monkeypatch, caplog):
    choice, source = attention.decide_bf16_attention()
    assert source == "measured" and choice in ("bf16", "fp32")
    entry = json.loads(cache.read_text())[tuning.machine_key()]["bf16_attention"]
    assert entry["choice"] == choice and set(entry["details"]) == {"bf16_ms", "fp32_ms"}
    assert attention.decide_bf16_attention() == (choice, "cache")
    other = "bf16" if choice == "fp32" else "fp32"
    attention.resume_bf16_attention(other)  # what the resumed run recorded wins over this machine's choice
    assert attention.bf16_attention() == other
    attention.use_bf16_attention(None)
    attention.resume_bf16_attention(None)  # nothing recorded (an fp32 run): the machine's choice
    assert attention.bf16_attention() == choice
    attention.use_bf16_attention(None)
    monkeypatch.setenv("BERTKIT_BF16_ATTENTION", choice)
    with caplog.at_level("WARNING", logger="bertkit"):
        attention.resume_bf16_attention(other)
    assert attention.bf16_attention() == choice and "not bitwise" in caplog.text
    with pytest.raises(ValueError, match="must be one of bf16, fp32"):
        attention.use_bf16_attention("fp16")


class ToyAttention(nn.Module):
    """A model whose loss goes through attention: under bf16 autocast its q, k, v are bf16."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        h = self.lin(x).view(-1, 1, 2, 4)  # [B, heads, T, d]
        out = attention.scaled_dot_product_attention(h, h, h)
        return {"loss": ((out.float().mean((1, 2, 3)) - y[:, 0]) ** 2).mean()}


def test_a_bf16_run_records_how_its_attention_ran_and_a_resume_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_PRECISION", "bf16")
    monkeypatch.setenv("BERTKIT_BF16_ATTENTION", "fp32")
    toy_trainer(tmp_path / "run", 2, ToyAttention).fit()
    _, state = latest_checkpoint(tmp_path / "run")
    assert state["choices"]["bf16_attention"] == "fp32"
    monkeypatch.delenv("BERTKIT_BF16_ATTENTION")
    attention.use_bf16_attention(None)
    monkeypatch.setattr(attention, "decide_bf16_attention", lambda force=False: ("bf16", "measured"))
    assert toy_trainer(tmp_path / "run", 4, ToyAttention).fit(resume=True)["steps"] == 4
    assert attention.bf16_attention() == "fp32"  # the checkpoint's, not this machine's "bf16"
