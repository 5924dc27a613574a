"""bertkit.modernbert against transformers' ModernBERT: hidden states and every head's outputs on random
weights, padded batches longer than the sliding window, and checkpoints moved both ways."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit import kernels
from bertkit.errors import UserError
from bertkit.kernels import window_mask
from bertkit.modernbert import (
    ModernBertForMaskedLM,
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
    rotary_inverse_frequencies,
    rotate_queries_and_keys,
)
from bertkit.modernbert_config import ModernBertConfig

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertModel"):
    pytest.skip("this transformers has no ModernBERT", allow_module_level=True)

VOCAB = 101
SPECIAL = dict(pad_token_id=0, bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2)

# (settings, sequence length): every config differs in what it switches on
CONFIGS = {
    # all layers global, every bias on, the tanh GELU, odd head count
    "global-biases": (
        dict(
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=3,
            intermediate_size=40,
            global_attn_every_n_layers=1,
            local_attention=8,
            norm_bias=True,
            attention_bias=True,
            mlp_bias=True,
            classifier_bias=True,
            hidden_activation="gelu_pytorch_tanh",
            classifier_pooling="mean",
        ),
        40,
    ),
    # window 16 (reach 8) and a global layer every third: layers 0 and 3 global, 1 and 2 local; 70 > 16
    "window-and-period": (
        dict(
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=96,
            global_attn_every_n_layers=3,
            local_attention=16,
            global_rope_theta=500.0,
            local_rope_theta=40.0,
        ),
        70,
    ),
    # the released model's shape of window (128) and period (3), small, on 300 tokens; an odd window width
    "long": (
        dict(
            hidden_size=32,
            num_hidden_layers=3,
            num_attention_heads=2,
            intermediate_size=64,
            global_attn_every_n_layers=2,
            local_attention=129,
            decoder_bias=False,
        ),
        300,
    ),
}


def settings(name: str, **more) -> dict:
    return dict(vocab_size=VOCAB, **SPECIAL, **CONFIGS[name][0], **more)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights far from the initialisation (LayerNorms included), so a wrong term shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.2
            p.copy_(1.0 + noise if "norm" in name and name.endswith("weight") else noise)


def twins(name: str, ours_cls, theirs_cls, seed: int = 0, **more):
    """A transformers model with random weights and the bertkit model holding the same ones."""
    theirs = theirs_cls(transformers.ModernBertConfig(**settings(name, **more), attn_implementation="sdpa"))
    randomize(theirs, seed)
    theirs.eval()
    ours = ours_cls(ModernBertConfig.from_dict(settings(name, **more)))
    info = ours.load_checkpoint_state(theirs.state_dict())
    assert not info.missing_keys and not info.unexpected_keys
    return ours.eval(), theirs


def batch(seq_len: int, seed: int = 1, rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, T] ids and mask: a full row, right padding (short and long runs of it), and left padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (rows, seq_len), generator=g)
    mask = torch.ones_like(ids)
    mask[1, seq_len // 2 :] = 0
    mask[2, 3:] = 0
    mask[3, : seq_len // 3] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.fixture(params=[True, False], ids=["kernels", "reference-ops"])
def kernels_on(request):
    previous = kernels.set_enabled(request.param)
    yield request.param
    kernels.set_enabled(previous)


def close(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Equal within 1e-5 of the outputs' scale (at the real positions when a [B, T] mask is given): hidden
    states are LayerNorm outputs of scale ~1; logits reach ~10, where fp32 rounding alone is ~1e-6 each."""
    if mask is not None:
        ours, theirs = ours[mask.bool()], theirs[mask.bool()]
    assert ours.shape == theirs.shape
    assert torch.isfinite(ours).all()
    scale = max(1.0, float(theirs.abs().max()))
    torch.testing.assert_close(ours, theirs, atol=1e-5 * scale, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ encoder


@pytest.mark.parametrize("name", list(CONFIGS))
def test_hidden_states_equal_transformers(name, kernels_on):
    ours, theirs = twins(name, ModernBertModel, transformers.ModernBertModel)
    ids, mask = batch(CONFIGS[name][1])
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask).last_hidden_state
        close(ours(ids, attention_mask=mask).last_hidden_state, want, mask)
        states = ours(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        want_states = theirs(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        assert len(states) == len(want_states) == ours.config.num_hidden_layers + 1
        for got_state, want_state in zip(states, want_states):
            close(got_state, want_state, mask)
        # no padding: one full row alone, and the batch without a mask
        close(ours(ids[:1]).last_hidden_state, theirs(ids[:1]).last_hidden_state)
        close(ours(ids).last_hidden_state, theirs(ids).last_hidden_state)


def test_window_and_period_both_matter():
    """The window-and-period case is one where a wrong window width or a wrong layer pattern changes the
    outputs: so its parity above checks both."""
    ours, _ = twins("window-and-period", ModernBertModel, transformers.ModernBertModel)
    assert [layer.attn.is_global for layer in ours.layers] == [True, False, False, True]
    ids, mask = batch(70)
    with torch.no_grad():
        base = ours(ids, attention_mask=mask).last_hidden_state
        for layer in ours.layers:  # one more token of reach in the local layers
            if layer.attn.window is not None:
                layer.attn.window += 1
        wider = ours(ids, attention_mask=mask).last_hidden_state
        for layer in ours.layers:  # every layer global
            layer.attn.window, layer.attn.is_global = None, True
        dense = ours(ids, attention_mask=mask).last_hidden_state
    m = mask.bool()
    assert (base - wider)[m].abs().max() > 1e-3
    assert (base - dense)[m].abs().max() > 1e-3


def test_window_mask_reach():
    m = window_mask(6, 2)
    assert m[0].tolist() == [True, True, True, False, False, False]
    assert m[3].tolist() == [False, True, True, True, True, True]


def test_padding_does_not_change_real_tokens(kernels_on):
    """A sequence's states are the same alone and in a padded batch (either padding side, packed or masked)."""
    ours, _ = twins("window-and-period", ModernBertModel, transformers.ModernBertModel)
    ids, mask = batch(70)
    with torch.no_grad():
        together = ours(ids, attention_mask=mask).last_hidden_state
        for row in range(ids.shape[0]):
            real = mask[row].bool()
            alone = ours(ids[row][real][None]).last_hidden_state[0]
            # left padding shifts the positions, which rotary attention does not see (up to rounding)
            torch.testing.assert_close(together[row][real], alone, atol=1e-4, rtol=1e-4)


def test_mask_with_holes_runs_padded():
    """Real tokens that are not side by side: the window counts places in [B, T], as transformers."""
    ours, theirs = twins("window-and-period", ModernBertModel, transformers.ModernBertModel)
    ids, mask = batch(70)
    mask[0, 10:20] = 0
    with torch.no_grad():
        close(
            ours(ids, attention_mask=mask).last_hidden_state,
            theirs(ids, attention_mask=mask).last_hidden_state,
            mask,
        )


def test_gradients_flow_in_training():
    ours, _ = twins("window-and-period", ModernBertForMaskedLM, transformers.ModernBertForMaskedLM)
    ours.train()
    ids, mask = batch(70)
    labels = ids.masked_fill(mask == 0, -100)
    out = ours(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    grads = [p.grad for p in ours.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def _angles(rows: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.arange(rows)[:, None].float() * rotary_inverse_frequencies(160.0, d)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def test_rotation_kernel_equals_the_plain_form():
    heads, d, rows = 3, 8, 11
    cos, sin = _angles(rows, d)
    qkv = torch.randn(rows, 3 * heads * d)
    with kernels.reference_ops():
        plain = rotate_queries_and_keys(qkv, cos, sin, heads)
    assert not torch.allclose(plain, qkv)  # the rotation did turn Q and K
    with torch.no_grad():  # no autograd: the projection itself is rotated
        mine = qkv.clone()
        assert kernels.rotate_queries_and_keys(mine, cos, sin, heads) is mine
    torch.testing.assert_close(mine, plain, atol=1e-6, rtol=0)
    torch.testing.assert_close(mine[:, 2 * heads * d :], qkv[:, 2 * heads * d :], atol=0, rtol=0)

    grad = torch.randn_like(qkv)
    x_plain, x_fast = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    with kernels.reference_ops():
        rotate_queries_and_keys(x_plain, cos, sin, heads).backward(grad)
    out = kernels.rotate_queries_and_keys(x_fast, cos, sin, heads)
    out.backward(grad)
    torch.testing.assert_close(out.detach(), plain, atol=1e-6, rtol=0)
    torch.testing.assert_close(x_fast.grad, x_plain.grad, atol=1e-6, rtol=0)
    torch.testing.assert_close(x_fast.detach(), qkv, atol=0, rtol=0)  # under autograd: a new tensor


def test_kernels_on_and_off_give_equal_gradients():
    ours, _ = twins("window-and-period", ModernBertForMaskedLM, transformers.ModernBertForMaskedLM)
    ours.train()
    ids, mask = batch(70)
    labels = ids.masked_fill(mask == 0, -100)
    grads = []
    for on in (True, False):
        previous = kernels.set_enabled(on)
        try:
            ours.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            ours(ids, attention_mask=mask, labels=labels).loss.backward()
        finally:
            kernels.set_enabled(previous)
        grads.append({k: p.grad.clone() for k, p in ours.named_parameters()})
    for k, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][k], atol=1e-5, rtol=1e-4, msg=k)


# -------------------------------------------------------------------------------------------------- heads


@pytest.mark.parametrize("name", ["window-and-period", "long"])
def test_masked_lm_logits_equal_transformers(name, kernels_on):
    ours, theirs = twins(name, ModernBertForMaskedLM, transformers.ModernBertForMaskedLM)
    assert ours.decoder.weight is ours.model.embeddings.tok_embeddings.weight
    ids, mask = batch(CONFIGS[name][1])
    labels = ids.masked_fill(mask == 0, -100)
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask, labels=labels)
        got = ours(ids, attention_mask=mask, labels=labels)
    close(got.logits, want.logits, mask)
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)


def test_sparse_prediction_equals_transformers(kernels_on):
    """``sparse_prediction``: logits for the labelled positions only, in the same order."""
    ours, theirs = twins(
        "long", ModernBertForMaskedLM, transformers.ModernBertForMaskedLM, sparse_prediction=True
    )
    ids, mask = batch(300)
    labels = torch.full_like(ids, -100)
    labels[0, ::7], labels[3, 150::11] = ids[0, ::7], ids[3, 150::11]
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask, labels=labels)
        got = ours(ids, attention_mask=mask, labels=labels)
    assert got.logits.shape == want.logits.shape == (int((labels != -100).sum()), VOCAB)
    close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_sequence_classification_equals_transformers(name, kernels_on):
    ours, theirs = twins(
        name,
        ModernBertForSequenceClassification,
        transformers.ModernBertForSequenceClassification,
        num_labels=3,
    )
    ids, mask = batch(CONFIGS[name][1])
    ids, mask = ids[:3], mask[:3]  # cls pooling reads token 0: rows that start with a real token
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask, labels=labels)
        got = ours(ids, attention_mask=mask, labels=labels)
    close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)


def test_token_classification_equals_transformers(kernels_on):
    ours, theirs = twins(
        "window-and-period",
        ModernBertForTokenClassification,
        transformers.ModernBertForTokenClassification,
        num_labels=5,
    )
    ids, mask = batch(70)
    labels = (ids % 5).masked_fill(mask == 0, -100)
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask, labels=labels)
        got = ours(ids, attention_mask=mask, labels=labels)
    close(got.logits, want.logits, mask)
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)


def test_question_answering_equals_transformers(kernels_on):
    ours, theirs = twins("long", ModernBertForQuestionAnswering, transformers.ModernBertForQuestionAnswering)
    ids, mask = batch(300)
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask)
        got = ours(ids, attention_mask=mask)
    close(got.start_logits, want.start_logits, mask)
    close(got.end_logits, want.end_logits, mask)
    # the loss's softmax runs over every position, padding included (as transformers'): compared unpadded
    ids = ids[:, :100]
    starts, ends = torch.tensor([3, 10, 1, 50]), torch.tensor([5, 12, 2, 400])  # 400: outside, ignored
    with torch.no_grad():
        want = theirs(ids, start_positions=starts, end_positions=ends)
        got = ours(ids, start_positions=starts, end_positions=ends)
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["global-biases", "window-and-period"])
def test_multiple_choice_equals_transformers(name, kernels_on):
    ours, theirs = twins(name, ModernBertForMultipleChoice, transformers.ModernBertForMultipleChoice)
    ids, mask = batch(CONFIGS[name][1])  # row 3 is left-padded: cls pooling reads its first real token
    ids, mask = ids.view(2, 2, -1), mask.view(2, 2, -1)
    labels = torch.tensor([1, 0])
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask, labels=labels)
        got = ours(ids, attention_mask=mask, labels=labels)
    close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- checkpoints


def test_transformers_folder_round_trip(tmp_path):
    """transformers saves -> bertkit loads and saves -> transformers loads: same logits, same config."""
    _, theirs = twins("window-and-period", ModernBertForMaskedLM, transformers.ModernBertForMaskedLM, seed=5)
    theirs.save_pretrained(tmp_path / "hf")
    ours = ModernBertForMaskedLM.from_pretrained(tmp_path / "hf")
    ours.save_pretrained(tmp_path / "ours")
    back = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path / "ours", attn_implementation="sdpa"
    ).eval()
    ids, mask = batch(70)
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask).logits
        close(ours(ids, attention_mask=mask).logits, want, mask)
        close(back(ids, attention_mask=mask).logits, want, mask)
    for key in ("local_attention", "layer_types", "rope_parameters", "num_hidden_layers", "pad_token_id"):
        assert getattr(back.config, key) == getattr(theirs.config, key), key
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [
        "ModernBertForMaskedLM"
    ]


def test_encoder_checkpoint_into_a_head_and_back(tmp_path):
    """A bertkit-saved encoder (no ``model.`` prefix) loads into a head, and a head's folder into the encoder."""
    ours, theirs = twins("long", ModernBertModel, transformers.ModernBertModel)
    ours.save_pretrained(tmp_path / "enc")
    head, info = ModernBertForTokenClassification.from_pretrained(
        tmp_path / "enc", num_labels=4, output_loading_info=True
    )
    assert sorted(info.missing_keys) == [
        "classifier.bias",
        "classifier.weight",
        "head.dense.weight",
        "head.norm.weight",
    ]
    ids, mask = batch(300)
    with torch.no_grad():
        close(
            head.model(ids, attention_mask=mask).last_hidden_state,
            theirs(ids, attention_mask=mask).last_hidden_state,
            mask,
        )
    head.save_pretrained(tmp_path / "head")
    enc = ModernBertModel.from_pretrained(tmp_path / "head")
    with torch.no_grad():
        close(
            enc(ids, attention_mask=mask).last_hidden_state,
            theirs(ids, attention_mask=mask).last_hidden_state,
            mask,
        )


# ----------------------------------------------------------------------------------------------- config


def test_config_reads_the_released_spelling_and_transformers_5s():
    classic = dict(settings("window-and-period"), model_type="modernbert", reference_compile=True)
    c = ModernBertConfig.from_dict(classic)
    assert (c.global_attn_every_n_layers, c.local_attention, c.window) == (3, 16, 8)
    assert c.extra["reference_compile"] is True  # kept and written back
    written = c.to_dict()
    assert written["layer_types"] == [
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ]
    assert written["rope_parameters"]["sliding_attention"]["rope_theta"] == 40.0
    # transformers 5's list and rope_parameters win over out-of-date classic keys
    newer = dict(
        classic,
        global_attn_every_n_layers=7,
        global_rope_theta=1.0,
        layer_types=["full_attention", "sliding_attention"] * 2,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 321.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 12.0},
        },
    )
    c = ModernBertConfig.from_dict(newer)
    assert (c.global_attn_every_n_layers, c.global_rope_theta, c.local_rope_theta) == (2, 321.0, 12.0)
    theirs = transformers.ModernBertConfig.from_dict(c.to_dict())
    assert theirs.layer_types == c.layer_types


@pytest.mark.parametrize(
    "change, words",
    [
        (
            dict(layer_types=["sliding_attention", "full_attention", "full_attention", "full_attention"]),
            "layer 0 global",
        ),
        (dict(layer_types=["full_attention"] * 3), "num_hidden_layers is 4"),
        (
            dict(rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 1.0}}),
            "rope_type 'yarn'",
        ),
        (dict(num_attention_heads=3), "even head size"),
        (dict(hidden_size=60, num_attention_heads=4), "even head size"),
        (dict(local_attention=0), "local_attention must be a positive integer"),
        (dict(classifier_pooling="max"), "classifier_pooling"),
        (dict(hidden_activation="swish"), "hidden_activation"),
        (dict(pad_token_id=VOCAB), "pad_token_id"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(tmp_path, change, words):
    (tmp_path / "config.json").write_text(json.dumps(dict(settings("window-and-period"), **change)))
    with pytest.raises(UserError) as e:
        ModernBertModel.from_pretrained(tmp_path)
    assert words in str(e.value) and "config.json" in str(e.value) and "\n" not in str(e.value)


def test_bert_config_is_refused():
    from bertkit.config import BertConfig

    with pytest.raises(TypeError, match="ModernBertConfig"):
        ModernBertModel(BertConfig.preset("tiny"))


# -------------------------------------------------------------------------------------------- long inputs


def test_long_inputs_run_local_layers_in_blocks(kernels_on, monkeypatch):
    """300 tokens, window reach 8: the local layers attend block by block (no [T, T] mask), equal to
    transformers' dense computation."""
    from bertkit.kernels import local_attention

    shapes = []
    sdpa = local_attention.scaled_dot_product_attention

    def spy(q, k, v, mask, causal, p):
        if mask is not None:  # None: a sequence within one window's reach, masked by padding only
            shapes.append(tuple(mask.shape))
        return sdpa(q, k, v, mask, causal, p)

    monkeypatch.setattr(local_attention, "scaled_dot_product_attention", spy)
    ours, theirs = twins("window-and-period", ModernBertModel, transformers.ModernBertModel)
    ids, mask = batch(300)
    with torch.no_grad():
        close(
            ours(ids, attention_mask=mask).last_hidden_state,
            theirs(ids, attention_mask=mask).last_hidden_state,
            mask,
        )
    block = local_attention.default_block(8)
    assert shapes and all(s[-2:] == (block, block + 16) for s in shapes if s[-1] != s[-2])
    assert any(s[-2:] == (block, block + 16) for s in shapes)
    assert all(max(s[-2:]) < 300 for s in shapes)


@pytest.mark.parametrize("t", [5, 9, 81, 128, 200, 257])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("block", [32, 8, 3])  # blocks wider than the window's reach, as wide, narrower
def test_sliding_window_blocks_equal_the_dense_band(t, padded, block):
    """Outputs and gradients of the blocked computation (and of the short cuts for short sequences) equal one
    SDPA call with the dense band mask."""
    from bertkit.kernels.local_attention import sliding_window_attention

    g = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(2, 3, t, 8, generator=g, requires_grad=True) for _ in range(3))
    key_mask = torch.ones(2, t, dtype=torch.bool)
    key_mask[1, t // 2 :] = not padded
    band = window_mask(t, 8) & (key_mask[:, None, None, :] | torch.eye(t, dtype=torch.bool))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band)
    got = sliding_window_attention(q, k, v, 8, key_mask if padded else None, block=block)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    grad = torch.randn(want.shape, generator=g)
    want_grads = torch.autograd.grad(want, (q, k, v), grad)
    got_grads = torch.autograd.grad(got, (q, k, v), grad)
    for a, b in zip(got_grads, want_grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


class _Window(torch.nn.Module):
    """The sliding-window kernel alone, for the exporter: q, k, v [1, 1, T, 8], key mask [1, T]."""

    def __init__(self, block: int | None) -> None:
        super().__init__()
        self.block = block

    def forward(self, q, k, v, key_mask):
        from bertkit.kernels.local_attention import sliding_window_attention

        return sliding_window_attention(q, k, v, 8, key_mask.bool(), block=self.block)


_ORT_PEAK = """
import resource, sys
import numpy as np, onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
t = int(sys.argv[2])
x = np.random.default_rng(0).standard_normal((1, 1, t, 8)).astype(np.float32)
feed = {"q": x, "k": x, "v": x, "key_mask": np.ones((1, t), dtype=np.int64)}
session.run(None, {**feed, "key_mask": np.ones((1, 40), dtype=np.int64), "q": x[:, :, :40], "k": x[:, :, :40], "v": x[:, :, :40]})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
session.run(None, feed)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("block", [32, 3, None])  # wider than the reach, narrower, the traced default
def test_an_exported_sliding_window_takes_any_length_in_blocks(tmp_path, block):
    """Traced on 20 tokens, the ONNX graph of the local layers' attention equals the dense band on lengths of
    one block to several, padded, and on 8,192 tokens adds far less memory than one [T, T] score matrix
    (256 MiB in fp32): it attends block by block, as the eager kernel does."""
    import subprocess
    import sys

    ort = pytest.importorskip("onnxruntime")
    g = torch.Generator().manual_seed(0)

    def inputs(t):
        q, k, v = (torch.randn(1, 1, t, 8, generator=g) for _ in range(3))
        key_mask = torch.ones(1, t, dtype=torch.long)
        key_mask[0, t - t // 4 :] = 0
        return q, k, v, key_mask

    path = tmp_path / "window.onnx"
    axes = {"q": {2: "t"}, "k": {2: "t"}, "v": {2: "t"}, "key_mask": {1: "t"}, "out": {2: "t"}}
    torch.onnx.export(_Window(block), inputs(20), str(path), input_names=["q", "k", "v", "key_mask"],
                      output_names=["out"], dynamic_axes=axes, opset_version=17, dynamo=False)  # fmt: skip
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for t in (5, 33, 81, 300):
        q, k, v, key_mask = inputs(t)
        band = window_mask(t, 8) & (key_mask.bool()[:, None, None, :] | torch.eye(t, dtype=torch.bool))
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band)
        feed = {"q": q.numpy(), "k": k.numpy(), "v": v.numpy(), "key_mask": key_mask.numpy()}
        torch.testing.assert_close(torch.from_numpy(session.run(None, feed)[0]), want, atol=1e-5, rtol=1e-5)
    peak = subprocess.run([sys.executable, "-c", _ORT_PEAK, str(path), "8192"], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert int(peak.stdout.strip()) < 64, f"8,192 tokens added {peak.stdout.strip()} MiB"
