"""Pre-training objectives as plug-ins: the registry and its CLI, ELECTRA on BERT and on ModernBERT (its loss by
hand, the transformers layouts, bitwise resume after SIGKILL, continuing a finished run) and RoBERTa's packed
FULL-SENTENCES stream."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from children import child_env

from bertkit.config import BertConfig
from bertkit.electra import ElectraPretrainingModel, generator_config
from bertkit.electra_modernbert import ModernBertElectraModel
from bertkit.errors import UserError
from bertkit.modernbert_config import ModernBertConfig
from bertkit.objectives import REGISTRY, Objective, get_objective

TINY = dict(hidden_size=64, num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)


def small_config(**kw) -> BertConfig:
    base = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    return BertConfig(**{**base, **kw})


def small_modernbert_config(**kw) -> ModernBertConfig:
    base = dict(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=24,
                max_position_embeddings=16, local_attention=4, global_attn_every_n_layers=2, pad_token_id=0,
                bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2)  # fmt: skip
    return ModernBertConfig(**{**base, **kw})


def electra_pair(arch: str, **kw) -> ElectraPretrainingModel | ModernBertElectraModel:
    """A tiny ELECTRA generator + discriminator of ``arch`` ("bert" or "modernbert")."""
    if arch == "bert":
        return ElectraPretrainingModel(small_config(), **kw)
    return ModernBertElectraModel(small_modernbert_config(), **kw)


def batch_of_two() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 50, (2, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # padding in the second row
    labels = torch.full_like(ids, -100)
    for r, c in ((0, 1), (0, 4), (1, 2), (1, 3)):
        labels[r, c] = ids[r, c]
        ids[r, c] = 3  # the data's [MASK]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# ------------------------------------------------------------------------------------------------ registry


def test_the_registry_names_every_objective_and_the_cli_offers_exactly_those():
    assert {"mlm+nsp", "mlm", "ltr", "roberta", "electra"} <= set(REGISTRY)
    assert all(issubclass(cls, Objective) and cls.name == name for name, cls in REGISTRY.items())
    from bertkit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command" or getattr(a, "choices", None))
    pretrain = sub.choices["pretrain"]
    choices = next(a.choices for a in pretrain._actions if a.dest == "objective")
    assert list(choices) == list(REGISTRY)


def test_unknown_objectives_and_options_are_refused_in_one_line():
    with pytest.raises(UserError, match="objective must be one of .*electra"):
        get_objective("nsp-only")
    with pytest.raises(UserError, match="unknown option.*generator_size.*generator_fraction"):
        get_objective("electra", {"generator_size": 0.5})
    with pytest.raises(UserError, match="discriminator_weight must be a float"):
        get_objective("electra", {"discriminator_weight": "fifty"})
    with pytest.raises(UserError, match="unknown option"):
        get_objective("mlm", {"generator_fraction": 0.5})  # the paper's objectives take none
    assert get_objective("electra", {"discriminator_weight": 10}).options["discriminator_weight"] == 10.0


def test_cli_objective_options_reach_the_run_config_and_bad_ones_exit_2(tmp_path):
    from bertkit.cli import build_parser
    from bertkit.cli.pretrain import config_from_args

    args = build_parser().parse_args(
        ["pretrain", "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--objective", "electra",
         "--objective-option", "generator_fraction=0.5", "--objective-option", "discriminator_weight=20"]
    )  # fmt: skip
    cfg = config_from_args(args)
    assert cfg.objective == "electra"
    assert cfg.objective_options == {"generator_fraction": 0.5, "discriminator_weight": 20}
    assert cfg.with_recipe().masked_lm_prob == 0.15  # ELECTRA's rate comes before the cpu recipe's 40%

    p = subprocess.run(
        [sys.executable, "-m", "bertkit", "pretrain", "--data", str(tmp_path), "--out", str(tmp_path / "o"),
         "--objective-option", "generator_fraction"],
        capture_output=True, text=True, env=child_env(), timeout=120,
    )  # fmt: skip
    assert p.returncode == 2 and "KEY=VALUE" in p.stderr


# ------------------------------------------------------------------------------------------------ ELECTRA


def test_generator_is_the_configured_fraction_of_the_discriminator():
    gen = generator_config(BertConfig.preset("mini"), 0.25)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (64, 1, 256)
    assert gen.num_hidden_layers == 4
    model = ElectraPretrainingModel(small_config(), generator_fraction=0.5)
    assert model.generator_config.hidden_size == 8
    # one embedding layer for both networks, and the generator's output layer is tied to it
    shared = model.discriminator.embeddings.word_embeddings.weight
    assert model.generator.embeddings._shared[0] is model.discriminator.embeddings
    assert model.generator_lm_head.weight is shared
    names = [n for n, _ in model.named_parameters()]
    assert sum("word_embeddings" in n for n in names) == 1


def generator_logits_by_hand(model, h: torch.Tensor) -> torch.Tensor:
    """The generator's head and tied output layer written out: hidden [N, h] -> logits [N, V]."""
    if isinstance(model, ElectraPretrainingModel):
        head = model.generator_predictions
        t = F.layer_norm(F.gelu(h @ head.dense.weight.T + head.dense.bias), (16,), head.LayerNorm.weight,
                         head.LayerNorm.bias, eps=1e-12)  # fmt: skip
        return t @ model.discriminator.embeddings.word_embeddings.weight.T + model.generator_lm_head.bias
    head, project = model.generator_head, model.generator.embeddings.tok_embeddings.project
    t = F.layer_norm(
        F.gelu(h @ head.dense.weight.T), (8,), head.norm.weight, eps=1e-5
    )  # ModernBERT: no biases
    table = model.discriminator.embeddings.tok_embeddings.weight @ project.weight.T + project.bias  # [V, 8]
    return t @ table.T + model.generator_decoder.bias


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_electra_loss_equals_the_paper_computed_by_hand(arch):
    torch.manual_seed(0)
    model = electra_pair(arch, generator_fraction=0.5, mask_token_id=3, discriminator_weight=50.0,
                         mask_token_prob=0.85).eval()  # fmt: skip
    assert model.generator_config.hidden_size == 8
    with torch.no_grad():  # non-zero biases, so a bias left out would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    batch = batch_of_two()
    torch.manual_seed(123)
    out = model(**batch)

    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    masked = labels != -100
    original = torch.where(masked, labels, ids)
    torch.manual_seed(123)  # the same draws, in the documented order
    show = masked & (torch.rand(ids.shape) < 0.85)
    gen_in = torch.where(show, torch.tensor(3), original)
    h = model.generator(gen_in, attention_mask=mask).last_hidden_state[masked]
    logits = generator_logits_by_hand(model, h)
    targets = original[masked]
    mlm = -(torch.log_softmax(logits, -1)[torch.arange(len(targets)), targets]).mean()
    u = torch.rand(len(targets), 1)  # one uniform per masked position, against the softmax's CDF
    cdf = torch.softmax(logits, -1).cumsum(-1)
    sampled = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
    corrupted = original.clone()
    corrupted[masked] = sampled
    is_replaced = (corrupted != original).float()
    d = model.discriminator(corrupted, attention_mask=mask).last_hidden_state
    dp = model.discriminator_predictions
    z = (F.gelu(d @ dp.dense.weight.T + dp.dense.bias) @ dp.dense_prediction.weight.T).squeeze(-1)
    z = z + dp.dense_prediction.bias
    p = torch.sigmoid(z)
    bce = -(is_replaced * torch.log(p) + (1 - is_replaced) * torch.log(1 - p))
    rtd = bce[mask.bool()].mean()

    torch.testing.assert_close(out.generator_loss, mlm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.discriminator_loss, rtd, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.loss, mlm + 50.0 * rtd, rtol=1e-5, atol=1e-5)
    assert torch.equal(out.replaced, (corrupted != original) & mask.bool())
    assert not out.replaced[1, 5:].any()  # padding is never a target


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_under_bf16_autocast_the_generator_logits_come_back_in_fp32_with_the_same_argmax(arch):
    """The step's generator logits are the fp32 copy the loss reads (the metrics' argmax is several times faster
    there), equal to the bf16 logits cast up, so the masked-LM accuracy is what the bf16 logits give."""
    torch.manual_seed(0)
    model = electra_pair(arch, generator_fraction=0.5, mask_token_id=3, mask_token_prob=1.0).eval()
    batch = batch_of_two()
    masked = batch["labels"] != -100
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch)
        bf16 = model.generator_logits(batch["input_ids"], batch["attention_mask"], None, masked)
    assert bf16.dtype == torch.bfloat16 and out.generator_logits.dtype == torch.float32
    assert torch.equal(out.generator_logits, bf16.float())
    correct = float((bf16.argmax(-1) == batch["labels"][masked]).sum())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, metrics = get_objective("electra").loss(model, batch)
    assert metrics["masked_lm_accuracy"] == (correct, float(masked.sum()))


@pytest.mark.parametrize(
    "block", [256, 4, 3, 1]
)  # one partial block; full blocks and a tail; full only; 1 each
def test_replacements_are_drawn_from_the_generators_softmax(block):
    """The sampler's frequencies over many rows match the softmax of fixed logits (five standard errors); a
    column of probability zero is never drawn, and the draws follow torch's generator."""
    from bertkit.electra import sample_rows

    logits = torch.tensor([2.0, 0.0, -1.0, 1.0, -float("inf"), 0.5])
    probs = torch.softmax(logits, -1).expand(100_000, -1)
    torch.manual_seed(7)
    draws = sample_rows(probs, block=block)
    freq = torch.bincount(draws, minlength=6).double() / len(draws)
    stderr = (probs[0].double() * (1 - probs[0].double()) / len(draws)).sqrt()
    assert ((freq - probs[0].double()).abs() <= 5 * stderr + 1e-12).all(), (freq, probs[0])
    assert freq[4] == 0
    torch.manual_seed(7)
    assert torch.equal(sample_rows(probs, block=block), draws)


def test_the_two_level_sampler_follows_a_wide_softmax_across_its_blocks():
    """V = 700 (two blocks of 256 and a tail of 188), a different distribution per row: each row's draws over
    many repeats match its softmax, columns of zero probability (the first of a block, the tail's last) never
    come, and no draw is past the vocabulary."""
    from bertkit.electra import sample_rows

    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 700, generator=gen) * 2
    logits[:, [0, 256, 512, 699]] = -float("inf")
    logits[1, 300] = 8.0  # one row with most of its mass in the middle block
    probs = torch.softmax(logits, -1)
    reps = 50_000
    torch.manual_seed(11)
    draws = sample_rows(probs.repeat(reps, 1)).view(reps, 4)
    assert int(draws.max()) < 700
    for row in range(4):
        freq = torch.bincount(draws[:, row], minlength=700).double() / reps
        p = probs[row].double()
        assert ((freq - p).abs() <= 5 * (p * (1 - p) / reps).sqrt() + 1e-4).all()
        assert freq[[0, 256, 512, 699]].sum() == 0


def test_fused_cross_entropy_equals_log_softmax_and_nll_with_its_gradient():
    """kernels.cross_entropy_with_probs: the loss and d(loss)/d(logits) of F.nll_loss(F.log_softmax(.)), and
    the softmax beside it."""
    from bertkit import kernels

    gen = torch.Generator().manual_seed(5)
    logits = (torch.randn(9, 50, generator=gen) * 3).requires_grad_()
    targets = torch.randint(0, 50, (9,), generator=gen)
    loss, probs = kernels.cross_entropy_with_probs(logits, targets)
    (loss * 2.5).backward()
    fused_grad, logits.grad = logits.grad, None
    want = torch.nn.functional.nll_loss(torch.log_softmax(logits, -1), targets)
    (want * 2.5).backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(fused_grad, logits.grad)
    torch.testing.assert_close(probs, torch.softmax(logits.detach(), -1))
    assert not probs.requires_grad


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_electra_step_with_kernels_on_and_off_gives_equal_losses_and_gradients(arch):
    from bertkit import kernels

    grads = []
    for on in (True, False):
        previous = kernels.set_enabled(on)
        try:
            torch.manual_seed(0)
            model = electra_pair(arch, generator_fraction=0.5, mask_token_id=3)
            out = model(**batch_of_two())
            out.loss.backward()
            grads.append((out.loss.detach(), out.replaced, [p.grad for p in model.parameters()]))
        finally:
            kernels.set_enabled(previous)
    (loss_a, replaced_a, grads_a), (loss_b, replaced_b, grads_b) = grads
    assert torch.equal(replaced_a, replaced_b)  # the same replacements drawn
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-6)
    assert sum(g is not None for g in grads_a) > 10  # both networks' weights have gradients
    for a, b in zip(grads_a, grads_b, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("arch, names", [
    ("bert", ("generator.encoder.layer.0.attention.self.query.weight",
              "discriminator.encoder.layer.1.output.dense.weight",
              "discriminator.embeddings.word_embeddings.weight", "generator.embeddings.project.weight")),
    ("modernbert", ("generator.layers.0.attn.Wqkv.weight", "discriminator.layers.1.mlp.Wo.weight",
                    "discriminator.embeddings.tok_embeddings.weight", "generator_decoder.bias",
                    "generator.embeddings.tok_embeddings.project.weight")),
])  # fmt: skip
def test_only_masked_positions_can_be_replaced_and_gradients_reach_both_networks(arch, names):
    torch.manual_seed(0)
    model = electra_pair(arch, generator_fraction=0.5, mask_token_id=3)
    batch = batch_of_two()
    out = model(**batch)
    assert not out.replaced[batch["labels"] == -100].any()
    out.loss.backward()
    for name in names:
        grad = model.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_electra_layouts_load_in_transformers_with_equal_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = ElectraPretrainingModel(small_config(hidden_dropout_prob=0.1), generator_fraction=0.5).eval()
    disc_dir, gen_dir = model.save_pretrained_electra(tmp_path / "electra")
    model.save_pretrained_bert(tmp_path / "bert")
    batch = batch_of_two()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    real = mask.bool()
    with torch.no_grad():
        ours_disc = model.discriminator_predictions(model.discriminator(ids, mask).last_hidden_state)
        ours_gen = model.generator_lm_head(
            model.generator_predictions(model.generator(ids, mask).last_hidden_state)
        )
        theirs_disc = transformers.ElectraForPreTraining.from_pretrained(disc_dir).eval()(ids, mask).logits
        theirs_gen = transformers.ElectraForMaskedLM.from_pretrained(gen_dir).eval()(ids, mask).logits
        bert = transformers.BertModel.from_pretrained(tmp_path / "bert").eval()(ids, mask).last_hidden_state
        ours_hidden = model.discriminator(ids, mask).last_hidden_state
    torch.testing.assert_close(ours_disc[real], theirs_disc[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_gen[real], theirs_gen[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_hidden[real], bert[real], rtol=1e-5, atol=1e-5)


def test_modernbert_electra_folders_load_in_transformers_with_equal_outputs(tmp_path):
    """The discriminator is a plain ModernBertModel folder, the generator a ModernBertForMaskedLM one (its token
    embeddings the projected shared table): transformers loads each and computes what ours does."""
    transformers = pytest.importorskip("transformers")
    from bertkit.modernbert import ModernBertForMaskedLM

    torch.manual_seed(0)
    model = electra_pair("modernbert", generator_fraction=0.5).eval()
    with torch.no_grad():
        model.generator_decoder.bias.normal_()
    model.save_pretrained_modernbert(tmp_path / "model")
    gen_dir = model.save_pretrained_electra(tmp_path / "model" / "electra")
    batch = batch_of_two()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    real = mask.bool()
    with torch.no_grad():
        ours_hidden = model.discriminator(ids, attention_mask=mask).last_hidden_state
        ours_gen = model.generator_decoder(model.generator_head(model.generator(ids, attention_mask=mask)[0]))
        kw = dict(attn_implementation="sdpa")
        theirs_hidden = (
            transformers.ModernBertModel.from_pretrained(tmp_path / "model", **kw)
            .eval()(input_ids=ids, attention_mask=mask)
            .last_hidden_state
        )
        theirs_gen = (
            transformers.ModernBertForMaskedLM.from_pretrained(gen_dir, **kw)
            .eval()(input_ids=ids, attention_mask=mask)
            .logits
        )
        again = ModernBertForMaskedLM.from_pretrained(gen_dir, sparse_prediction=False)(ids, mask).logits
    torch.testing.assert_close(ours_hidden[real], theirs_hidden[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_gen[real], theirs_gen[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_gen[real], again[real], rtol=1e-5, atol=1e-5)
    saved = json.loads((tmp_path / "model" / "config.json").read_text())
    assert saved["model_type"] == "modernbert" and saved["architectures"] == ["ModernBertModel"]


@pytest.mark.parametrize("config", [small_config, small_modernbert_config])
@pytest.mark.parametrize("fraction", [0.0, 1.5, -0.25])
def test_a_bad_generator_fraction_is_one_line_for_either_architecture(config, fraction):
    objective = get_objective("electra", {"generator_fraction": fraction})
    with pytest.raises(UserError, match=r"generator_fraction must be in \(0, 1\]") as e:
        objective.build_model(config())
    assert "\n" not in str(e.value)


def test_a_modernbert_generator_keeps_an_even_head_width():
    from bertkit.electra_modernbert import modernbert_generator_config

    base = ModernBertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=1152)
    gen = modernbert_generator_config(base, 0.25)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (192, 3, 288)
    assert gen.num_hidden_layers == base.num_hidden_layers and gen.tie_word_embeddings
    odd = modernbert_generator_config(small_modernbert_config(hidden_size=36), 0.25)
    assert (odd.hidden_size, odd.num_attention_heads) == (
        8,
        1,
    )  # 36 / 4 = 9: BERT's rule keeps 9, rotary needs 8


@pytest.fixture(scope="module")
def data_dir(tiny_data) -> Path:
    return tiny_data


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from bertkit.cli import build_parser
    from bertkit.cli.pretrain import config_from_args
    from bertkit.pretrain import pretrain
    kill_at = int(sys.argv[1])
    args = build_parser().parse_args(sys.argv[2:])
    def killer(rec):
        if rec["step"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    pretrain(config_from_args(args), resume=args.resume, callbacks=[killer])
    """
)


def _losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def _killed_resumed_and_uninterrupted(tmp_path: Path, common: list) -> tuple[Path, Path]:
    """``bertkit pretrain *common`` run whole (``ref``), and killed by SIGKILL after step 10 then resumed
    (``run``); asserts the kill and the resume happened and that the logged losses are bitwise equal. All three
    run as children with one environment: the uninterrupted run in this process would compute under whatever
    an earlier test left here (threads, GEMM backend), which rounds differently."""
    argv = lambda out, *extra: ["pretrain", "--out", str(out), *map(str, common), *extra]  # noqa: E731
    ref, run = tmp_path / "ref", tmp_path / "killed"
    whole = subprocess.run([sys.executable, "-m", "bertkit", *argv(ref)], env=child_env(), capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    p = subprocess.run([sys.executable, script, "10", *argv(run)], env=child_env(), capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert _losses(run)[-1][0] == 10 and not (run / "model").exists()
    resumed = subprocess.run([sys.executable, "-m", "bertkit", *argv(run, "--resume")], env=child_env(),
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _losses(run) == _losses(ref)  # bitwise
    return run, ref


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_electra_run_resumes_bitwise_after_sigkill_and_saves_both_layouts(tmp_path, data_dir, arch, capsys):
    from bertkit.cli import main

    cfg = tmp_path / "cfg.toml"  # dropout on: the RNG (dropout and the generator's samples) must be restored
    cfg.write_text("[objective_options]\ngenerator_fraction = 0.5\n")
    if arch == "bert":
        with cfg.open("a") as f:
            f.write(
                "[model]\n" + "\n".join(f"{k} = {v}" for k, v in TINY.items()) + "\nnum_hidden_layers = 2\n"
            )
        shape = []
    else:
        shape = ["--model-config", _modernbert_config_file(tmp_path, embedding_dropout=0.1, mlp_dropout=0.1)]
    common = ["--data", data_dir, "--config", cfg, "--objective", "electra", "--steps", 12, "--batch-size", 8,
              "--max-seq-length", 64, "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 4, "--eval-every", 6,
              "--eval-batches", 1, "--quiet", "--valid-documents", 2, *shape]  # fmt: skip
    run, ref = _killed_resumed_and_uninterrupted(tmp_path, common)
    rows = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    assert {"discriminator_loss", "replaced_token_accuracy", "masked_lm_loss"} <= set(rows[-1])

    from safetensors.torch import load_file

    electra = {"bert": ("discriminator/model.safetensors", "generator/model.safetensors"),
               "modernbert": ("generator/model.safetensors", "training.safetensors")}[arch]  # fmt: skip
    files = [Path("model/model.safetensors"), *(Path("model/electra") / rel for rel in electra)]
    for rel in files:
        a, b = load_file(run / rel), load_file(ref / rel)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), rel
    for folder in (rel.parent for rel in files if rel.name == "model.safetensors"):
        assert (run / folder / "vocab.txt").is_file(), folder
    name = {"bert": "Bert", "modernbert": "ModernBert"}[arch]
    assert json.loads((run / "model" / "config.json").read_text())["architectures"] == [f"{name}Model"]
    arch_name = "ModernBERT" if arch == "modernbert" else "BERT"
    title = f"# A {arch_name} encoder pre-trained with bertkit as ELECTRA's discriminator\n"
    assert title in (run / "model" / "README.md").read_text()

    # the discriminator's folder fine-tunes like any encoder of its architecture
    rows = [
        {"text": f"the {w} value of the file", "label": str(i % 2)}
        for i, w in enumerate(["name", "path"] * 8)
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["finetune", "classify", "--train", str(train), "--dev", str(train), "--model", str(run / "model"),
                 "--out", str(tmp_path / "ft"), "--epochs", "1", "--batch-size", "8", "--max-seq-length", "32",
                 "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    tuned = json.loads((tmp_path / "ft" / "model" / "config.json").read_text())
    assert tuned["architectures"] == [f"{name}ForSequenceClassification"] and tuned["hidden_size"] == 64


# ------------------------------------------------------------------------------------------------ RoBERTa


def _stream_of_shard(ds, k: int) -> list[int]:
    """The shard's split documents read one after another with a [SEP] after each (the packing's stream)."""
    arr = ds.shards.arrays[k]
    starts = list(ds.doc_start_tok[k])
    sh = ds.shards
    docs = [d for d in range(ds.doc_lo, ds.doc_hi) if sh.doc_shard[d] == k]
    out: list[int] = []
    for d in docs:
        lo = int(arr["sents"][sh.doc_sent_lo[d]])
        hi = int(arr["sents"][sh.doc_sent_hi[d]])
        out += [int(x) for x in arr["ids"][lo:hi]] + [ds.sep_id]
    assert len(starts) == len(docs)
    return out


def test_packed_instances_fill_the_window_across_documents_with_a_separator(data_dir):
    from bertkit.data.dynamic import PretrainingDataset

    kw = dict(max_seq_length=64, masked_lm_prob=0.15, max_predictions_per_seq=10, seed=3, no_nsp=True)
    packed = PretrainingDataset(data_dir, pack_documents=True, **kw)
    single = PretrainingDataset(data_dir, **kw)
    assert len(packed) < len(single)  # fewer, fuller instances
    items = packed.__getitems__(list(range(len(packed))))
    lengths = [len(items[i]["input_ids"]) for i in range(len(packed))]
    single_items = single.__getitems__(list(range(len(single))))
    single_mean = np.mean([len(single_items[i]["input_ids"]) for i in range(len(single))])
    assert np.mean(lengths) > max(0.85 * 64, single_mean + 2)
    streams = {k: _stream_of_shard(packed, k) for k in range(len(packed.shards.arrays))}
    crossed = 0
    for i in range(len(packed)):
        it = items[i]
        ids, labels = np.asarray(it["input_ids"]), np.asarray(it["labels"])
        assert "next_sentence_label" not in it and not np.asarray(it["token_type_ids"]).any()
        n = lengths[i]
        original = np.where(labels != -100, labels, ids)[1 : n - 1].tolist()
        assert ids[0] == packed.cls_id and ids[n - 1] == packed.sep_id
        assert (labels[np.asarray(ids) == packed.sep_id] == -100).all()  # separators are never predicted
        stream = streams[int(packed.chunk_shard[i])]
        s = int(packed.chunk_start_tok[i]) - int(packed.doc_start_tok[int(packed.chunk_shard[i])][0])
        s += int(np.searchsorted(packed.doc_start_tok[int(packed.chunk_shard[i])], packed.chunk_start_tok[i],
                                 side="right")) - 1  # separators before the chunk  # fmt: skip
        assert original == stream[s : s + len(original)], i  # a contiguous piece of the documents' stream
        crossed += packed.sep_id in original
    assert crossed > 0  # some instances span a document boundary
    again = packed.__getitems__([0, 5])
    assert np.array_equal(np.asarray(again[1]["input_ids"]), np.asarray(items[5]["input_ids"]))


def test_roberta_objective_runs_on_packed_data_and_refuses_static_instances(tmp_path, data_dir):
    from bertkit.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(data=str(data_dir), out=str(tmp_path / "r"), preset="tiny", objective="roberta",
                         model_overrides=TINY, steps=20, batch_size=8, max_seq_length=64, lr=2e-3, log_every=5,
                         checkpoint_every=0, eval_batches=1, progress=False, valid_documents=2, num_threads=1)  # fmt: skip
    assert cfg.with_recipe().masked_lm_prob == 0.15
    res = pretrain(cfg)
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert "next_sentence_accuracy" not in rows[-1] and rows[-1]["loss"] < rows[0]["loss"]
    assert res["objective"] == "roberta"
    with pytest.raises(UserError, match="packs documents"):
        from bertkit.pretrain import _load_dataset

        _load_dataset(str(data_dir), cfg.resolved_phases()[0], cfg, "train", fmt="static")


def shares_the_token_embeddings(model) -> bool:
    """Whether the generator reads (and, tied, writes) the discriminator's token embedding table itself."""
    if isinstance(model, ElectraPretrainingModel):
        return model.generator_lm_head.weight is model.discriminator.embeddings.word_embeddings.weight
    table = model.discriminator.embeddings.tok_embeddings
    projected = model.generator.embeddings.tok_embeddings
    return projected._shared[0] is table and model.generator_decoder._embeddings[0] is projected


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_electra_folders_load_back_to_continue_pre_training(tmp_path, arch):
    """``init_from`` a finished ELECTRA run's model dir restores both networks exactly, for either architecture:
    the objective saves what it later builds from."""
    torch.manual_seed(0)
    model = electra_pair(arch, generator_fraction=0.5, mask_token_id=3)
    with torch.no_grad():  # every tensor moved off its initial value, so one not restored would show
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    objective = get_objective("electra", mask_token_id=3)
    objective.save(model, tmp_path / "model")
    again = objective.build_model(small_config(), init_from=str(tmp_path / "model"))  # the dir decides
    assert type(again) is type(model)
    ours, theirs = model.state_dict(), again.state_dict()
    assert ours.keys() == theirs.keys()
    for k in ours:
        if not k.startswith("discriminator.pooler."):  # not part of the ELECTRA layout (never trained)
            assert torch.equal(ours[k], theirs[k]), k
    assert shares_the_token_embeddings(again)
    torch.manual_seed(5)
    a = model(**batch_of_two())
    torch.manual_seed(5)
    b = again(**batch_of_two())
    assert torch.equal(a.loss, b.loss)
    shutil.rmtree(tmp_path / "model" / "electra")
    with pytest.raises(UserError, match="not found"):
        objective.build_model(small_config(), init_from=str(tmp_path / "model"))


# ------------------------------------------------------------------------------------------------ ModernBERT


def _modernbert_config_file(tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "modernbert.json"
    path.write_text(json.dumps({
        "model_type": "modernbert", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64, "local_attention": 16,
        "global_attn_every_n_layers": 3, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3,
        "cls_token_id": 2, "sep_token_id": 3, **overrides,
    }))  # fmt: skip
    return path


@pytest.mark.parametrize("objective", ["mlm", "roberta", "mlm+nsp"])
def test_a_modernbert_model_pre_trains_with_the_masked_lm_objectives(tmp_path, data_dir, objective):
    transformers = pytest.importorskip("transformers")
    from bertkit.modernbert import ModernBertForMaskedLM
    from bertkit.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(data=str(data_dir), out=str(tmp_path / "m"), objective=objective,
                         model_config=str(_modernbert_config_file(tmp_path)), steps=24, batch_size=8,
                         max_seq_length=64, lr=2e-3, log_every=4, checkpoint_every=0, eval_batches=1, progress=False,
                         valid_documents=2, num_threads=1)  # fmt: skip
    pretrain(cfg)
    rows = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["masked_lm_loss"] < rows[0]["masked_lm_loss"]
    model_dir = tmp_path / "m" / "model"
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["model_type"] == "modernbert" and saved["vocab_size"] == len(
        (data_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    )
    ours = ModernBertForMaskedLM.from_pretrained(model_dir, sparse_prediction=False)
    theirs = transformers.ModernBertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    ids = torch.tensor([[2, 40, 41, 42, 43, 44, 3, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        a, b = ours(ids, mask).logits, theirs(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=1e-4, atol=1e-4)
    # with NSP: the same transformers layout, the NSP classifier beside it, and the NSP metrics logged
    assert saved["architectures"] == ["ModernBertForMaskedLM"]
    from safetensors.torch import load_file

    assert ("nsp_classifier.weight" in load_file(model_dir / "model.safetensors")) == (objective == "mlm+nsp")
    assert ("next_sentence_accuracy" in rows[-1]) == (objective == "mlm+nsp")


def test_modernbert_nsp_loss_is_the_masked_lm_loss_plus_nsp_cross_entropy_on_the_pooled_head():
    from bertkit.modernbert import ModernBertForPreTraining

    torch.manual_seed(0)
    model = ModernBertForPreTraining(small_modernbert_config()).eval()
    batch = batch_of_two()
    nsp = torch.tensor([0, 1])
    out = model(**batch, token_type_ids=torch.ones_like(batch["input_ids"]), next_sentence_label=nsp)
    hidden = model.model(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    keep = batch["labels"] != -100
    mlm = F.cross_entropy(model.decoder(model.head(hidden[keep])), batch["labels"][keep])
    nsp_logits = model.nsp_classifier(model.head(hidden[:, 0]))
    by_hand = mlm + F.cross_entropy(nsp_logits, nsp)
    torch.testing.assert_close(out.loss, by_hand, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.seq_relationship_logits, nsp_logits, rtol=1e-6, atol=1e-6)
    # a task classifier's start: a normal of std H^-1/2 cut at 2 std (so its std is 0.88 of that) and a zero
    # bias, not PyTorch's default (uniform: std H^-1/2 / sqrt(3), a bias drawn too); H = 64 tells them apart
    wide = ModernBertForPreTraining(small_modernbert_config(hidden_size=64, intermediate_size=96))
    assert wide.nsp_classifier.weight.std().item() == pytest.approx(0.88 * 64**-0.5, rel=0.2)
    assert wide.nsp_classifier.weight.abs().max().item() <= 2 * 64**-0.5
    assert torch.equal(wide.nsp_classifier.bias, torch.zeros(2))


def test_nsp_continues_a_modernbert_masked_lm_folder_and_fine_tuning_takes_its_head(tmp_path):
    from bertkit.modernbert import ModernBertForMaskedLM, ModernBertForSequenceClassification

    torch.manual_seed(0)
    objective = get_objective("mlm+nsp")
    ModernBertForMaskedLM(small_modernbert_config()).save_pretrained(tmp_path / "mlm")
    continued = objective.build_model(small_modernbert_config(), init_from=str(tmp_path / "mlm"))
    mlm = ModernBertForMaskedLM.from_pretrained(tmp_path / "mlm").state_dict()
    carried = continued.state_dict()  # the masked LM carried over
    assert all(torch.equal(carried[k], v) for k, v in mlm.items())
    with torch.no_grad():
        continued.nsp_classifier.weight.add_(1.0)
    objective.save(continued, tmp_path / "nsp")
    again = objective.build_model(small_modernbert_config(), init_from=str(tmp_path / "nsp"))
    assert torch.equal(again.nsp_classifier.weight, continued.nsp_classifier.weight)  # NSP restored too
    saved = json.loads((tmp_path / "nsp" / "config.json").read_text())
    assert saved["architectures"] == ["ModernBertForMaskedLM"]
    classifier = ModernBertForSequenceClassification.from_pretrained(tmp_path / "nsp", num_labels=2)
    assert torch.equal(classifier.head.dense.weight, continued.head.dense.weight)
    assert not any(k.startswith("nsp_") for k in classifier.state_dict())


def test_a_modernbert_nsp_run_resumes_bitwise_after_sigkill(tmp_path, data_dir):

    shape = ["--model-config", _modernbert_config_file(tmp_path, embedding_dropout=0.1, mlp_dropout=0.1)]
    common = ["--data", data_dir, "--objective", "mlm+nsp", "--steps", 12, "--batch-size", 8,
              "--max-seq-length", 64, "--lr", 1e-3, "--log-every", 1, "--checkpoint-every", 4, "--eval-every", 6,
              "--eval-batches", 1, "--quiet", "--valid-documents", 2, *shape]  # fmt: skip
    run, ref = _killed_resumed_and_uninterrupted(tmp_path, common)
    from safetensors.torch import load_file

    a, b = load_file(run / "model" / "model.safetensors"), load_file(ref / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("objective", ["ltr"])
def test_objectives_that_need_berts_heads_refuse_a_modernbert_config(tmp_path, data_dir, objective):
    from bertkit.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(data=str(data_dir), out=str(tmp_path / "m"), objective=objective,
                         model_config=str(_modernbert_config_file(tmp_path)), steps=2, batch_size=4,
                         max_seq_length=64, progress=False, num_threads=1)  # fmt: skip
    with pytest.raises(UserError, match="mlm, roberta or mlm\\+nsp"):
        pretrain(cfg)
