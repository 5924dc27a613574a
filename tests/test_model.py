"""BertModel against transformers' BertModel on real weights, and checkpoint interchange both ways."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.model import BertModel
from bertkit.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT is a bidirectional encoder.",
    "A considerably longer sentence, with commas, clauses and an unaffable vocabulary, to force padding of the others.",
    "Short.",
]


def _batch(tok: Tokenizer, pairs: bool = False):
    if pairs:
        return tok(SENTENCES, SENTENCES[::-1])
    return tok(SENTENCES)


def _hf_model(path, **kw):
    return transformers.BertModel.from_pretrained(path, attn_implementation="eager", **kw).eval()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return BertModel.from_pretrained(minilm_dir), _hf_model(minilm_dir), Tokenizer.from_pretrained(minilm_dir)


def _max_diff_real(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask.bool()].abs().max().item()


@pytest.mark.parametrize("pairs", [False, True])
def test_minilm_matches_transformers_on_padded_batch(minilm, pairs):
    ours, ref, tok = minilm
    batch = _batch(tok, pairs)
    assert batch["attention_mask"].min() == 0, "the batch must contain padding"
    with torch.no_grad():
        got = ours(**batch, output_hidden_states=True)
        want = ref(**batch, output_hidden_states=True)
    mask = batch["attention_mask"]
    assert _max_diff_real(got.last_hidden_state, want.last_hidden_state, mask) <= 1e-5
    assert (got.pooler_output - want.pooler_output).abs().max().item() <= 1e-5
    assert len(got.hidden_states) == len(want.hidden_states) == 7
    for a, b in zip(got.hidden_states, want.hidden_states):
        assert _max_diff_real(a, b, mask) <= 1e-5


def test_unpadded_path_equals_per_sentence_runs(minilm):
    """Packing real tokens must give each sentence the result it gets alone."""
    ours, _, tok = minilm
    batch = tok(SENTENCES)
    with torch.no_grad():
        together = ours(**batch).last_hidden_state
        for i, s in enumerate(SENTENCES):
            alone = ours(**tok([s])).last_hidden_state[0]
            n = alone.shape[0]
            assert (together[i, :n] - alone).abs().max().item() <= 1e-5


def test_causal_mask_blocks_the_future():
    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=50)).eval()
    ids = torch.randint(5, 50, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = 7
    with torch.no_grad():
        a = model(ids, causal=True).last_hidden_state
        b = model(changed, causal=True).last_hidden_state
        c = model(changed).last_hidden_state
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)  # earlier positions do not see later ones
    assert not torch.allclose(a[:, :6], c[:, :6], atol=1e-3)  # bidirectional ones do


def test_state_dict_keys_equal_transformers():
    config = BertConfig.preset("tiny", vocab_size=100)
    ours = set(BertModel(config).state_dict())
    hf_config = transformers.BertConfig(**config.to_dict())
    theirs = set(transformers.BertModel(hf_config).state_dict())
    assert ours == theirs - {"embeddings.position_ids", "embeddings.token_type_ids"}


def test_init_follows_the_original_release():
    config = BertConfig.preset("mini", vocab_size=1000)
    model = BertModel(config)
    w = model.encoder.layer[0].intermediate.dense.weight
    assert abs(w.std().item() - 0.02 * 0.88) < 0.002  # a ±2σ truncated normal has std 0.88σ
    assert w.abs().max().item() <= 0.04 + 1e-6
    assert torch.all(model.encoder.layer[0].intermediate.dense.bias == 0)
    assert torch.all(model.embeddings.LayerNorm.weight == 1)


def test_gelu_variants():
    x = torch.linspace(-4, 4, 101)
    exact = transformers.activations.ACT2FN["gelu"](x)
    approx = transformers.activations.ACT2FN["gelu_new"](x)
    from bertkit.model import ACT2FN

    assert torch.allclose(ACT2FN["gelu"](x), exact, atol=1e-6)
    assert torch.allclose(ACT2FN["gelu_new"](x), approx, atol=1e-6)
    assert not torch.allclose(exact, approx, atol=1e-5)


def test_saved_model_loads_in_transformers(minilm, tmp_path):
    ours, _, tok = minilm
    ours.save_pretrained(tmp_path)
    hf, info = transformers.BertModel.from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    assert info["missing_keys"] in ([], set()), info
    batch = _batch(tok)
    with torch.no_grad():
        a = ours(**batch)
        b = hf.eval()(**batch)
    assert _max_diff_real(a.last_hidden_state, b.last_hidden_state, batch["attention_mask"]) <= 1e-5
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertModel"]


@pytest.mark.parametrize("act", ["gelu", "gelu_new"])
def test_transformers_random_model_loads_in_bertkit(tmp_path, act):
    hf_config = transformers.BertConfig(
        vocab_size=120,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=128,
        hidden_act=act,
    )
    torch.manual_seed(1)
    hf = transformers.BertModel(hf_config).eval()
    hf.save_pretrained(tmp_path)
    ours = BertModel.from_pretrained(tmp_path)
    ids = torch.randint(0, 120, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert _max_diff_real(a.last_hidden_state, b.last_hidden_state, mask) <= 1e-5
    assert (a.pooler_output - b.pooler_output).abs().max() <= 1e-5


def test_loads_prefixed_legacy_and_bin_checkpoints(tmp_path):
    config = BertConfig.preset("tiny", vocab_size=60)
    torch.manual_seed(0)
    src = BertModel(config).eval()
    state = src.state_dict()
    # a pre-training checkpoint: "bert." prefix, legacy gamma/beta names, an extra head tensor
    legacy = {}
    for k, v in state.items():
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy["bert." + k] = v.clone()
    legacy["cls.seq_relationship.weight"] = torch.zeros(2, 128)
    config.save_pretrained(tmp_path)
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    loaded, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info.missing_keys == []
    assert info.unexpected_keys == ["cls.seq_relationship.weight"]
    ids = torch.randint(0, 60, (2, 7))
    with torch.no_grad():
        assert torch.equal(loaded(ids).last_hidden_state, src(ids).last_hidden_state)


def test_missing_keys_are_reported(tmp_path):
    config = BertConfig.preset("tiny", vocab_size=60)
    model = BertModel(config)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("pooler.")}
    config.save_pretrained(tmp_path)
    save_file(state, str(tmp_path / "model.safetensors"))
    _, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info.missing_keys == ["pooler.dense.bias", "pooler.dense.weight"]


def test_shape_mismatch_names_tensor_and_shapes(tmp_path):
    BertModel(BertConfig.preset("tiny", vocab_size=60)).save_pretrained(tmp_path)
    BertConfig.preset("tiny", vocab_size=70).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"embeddings\.word_embeddings\.weight.*\(60, 128\).*\(70, 128\)"):
        BertModel.from_pretrained(tmp_path)


def test_save_is_atomic_on_failure(tmp_path, monkeypatch):
    model = BertModel(BertConfig.preset("tiny", vocab_size=60))
    target = tmp_path / "model"
    model.save_pretrained(target)
    before = load_file(str(target / "model.safetensors"))

    import bertkit.modeling_utils as mu

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(mu, "save_state_dict", boom)
    with torch.no_grad():
        model.pooler.dense.bias.fill_(1.0)
    with pytest.raises(OSError):
        model.save_pretrained(target)
    after = load_file(str(target / "model.safetensors"))
    assert torch.equal(after["pooler.dense.bias"], before["pooler.dense.bias"])
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temp directory left behind


def test_too_long_input_is_refused():
    model = BertModel(BertConfig.preset("tiny", vocab_size=60, max_position_embeddings=16))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gradient_checkpointing_gives_same_gradients(dropout):
    """With dropout, the recomputed forward must draw the same masks (checkpoint restores the RNG state)."""
    torch.manual_seed(0)
    model = BertModel(
        BertConfig.preset(
            "tiny", vocab_size=60, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout
        )
    )
    ids = torch.randint(0, 60, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    model.train()

    def loss():
        torch.manual_seed(1)
        out = model(ids, mask)
        return out.last_hidden_state.sum() + out.pooler_output.sum()

    loss().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.gradient_checkpointing_enable()
    loss().backward()
    for a, p in zip(plain, model.parameters()):
        assert torch.allclose(a, p.grad, atol=1e-6)


def test_a_trace_keeps_the_mask_whatever_the_example():
    """Traced on a batch without padding, the graph still masks padding in a later batch (the "no padding,
    no mask" shortcut is skipped under tracing), and takes another batch size and length."""
    from bertkit import kernels
    from bertkit.export import BertGraph

    torch.manual_seed(0)
    model = BertModel(BertConfig.preset("tiny", vocab_size=50, num_hidden_layers=1)).eval()
    ids = torch.randint(5, 50, (2, 6))
    with torch.no_grad(), kernels.reference_ops():
        traced = torch.jit.trace(BertGraph(model), (ids, torch.ones_like(ids), torch.zeros_like(ids)))
    ids = torch.randint(5, 50, (3, 9))
    mask = (torch.arange(9)[None] < torch.tensor([9, 4, 2])[:, None]).long()
    with torch.no_grad():
        got = traced(ids, mask, torch.zeros_like(ids))[0]
        want = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)
