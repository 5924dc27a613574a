"""BertConfig: presets, JSON round trip with transformers, and clear errors for impossible settings."""

from __future__ import annotations

import json

import pytest

from bertkit.config import BertConfig
from bertkit.errors import UserError


@pytest.mark.parametrize(
    "name,layers,hidden,heads",
    [
        ("tiny", 2, 128, 2),
        ("mini", 4, 256, 4),
        ("small", 4, 512, 8),
        ("medium", 8, 512, 8),
        ("base", 12, 768, 12),
        ("large", 24, 1024, 16),
    ],
)
def test_presets(name, layers, hidden, heads):
    c = BertConfig.preset(name)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        layers,
        hidden,
        heads,
        4 * hidden,
    )


def test_preset_overrides_and_unknown_preset():
    assert BertConfig.preset("tiny", vocab_size=99).vocab_size == 99
    with pytest.raises(ValueError, match="huge"):
        BertConfig.preset("huge")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(hidden_size=100, num_attention_heads=12), "divisible"),
        (dict(num_hidden_layers=0), "num_hidden_layers"),
        (dict(vocab_size=-5), "vocab_size"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
        (dict(hidden_act="swish"), "hidden_act"),
        (dict(position_embedding_type="relative_key"), "position_embedding_type"),
    ],
)
def test_impossible_configs_raise_with_the_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BertConfig(**kwargs)


def test_json_roundtrip_keeps_unknown_keys(tmp_path):
    data = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 256,
        "vocab_size": 50,
        "transformers_version": "4.8.2",
        "my_custom_key": [1, 2],
        "id2label": {"0": "NEG", "1": "POS"},
    }
    (tmp_path / "config.json").write_text(json.dumps(data))
    c = BertConfig.from_pretrained(tmp_path)
    assert c.extra["my_custom_key"] == [1, 2]
    assert c.num_labels == 2 and c.label2id == {"NEG": 0, "POS": 1}
    c.save_pretrained(tmp_path / "out")
    again = json.loads((tmp_path / "out" / "config.json").read_text())
    assert again["my_custom_key"] == [1, 2] and again["transformers_version"] == "4.8.2"
    assert again["id2label"] == {"0": "NEG", "1": "POS"} and again["label2id"] == {"NEG": 0, "POS": 1}


def test_num_labels_builds_label_map():
    c = BertConfig.preset("tiny", num_labels=3)
    assert c.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}


def test_transformers_reads_our_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    BertConfig.preset("mini", hidden_act="gelu_new", num_labels=3).save_pretrained(tmp_path)
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    assert (hf.hidden_size, hf.num_hidden_layers, hf.hidden_act, hf.num_labels) == (256, 4, "gelu_new", 3)


def test_bad_config_file_names_the_file_and_line(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 64,\n "oops"}')
    with pytest.raises(UserError, match=r"config.json: line 2"):
        BertConfig.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 100, "num_attention_heads": 3}')
    with pytest.raises(UserError, match=r"config.json: .*divisible"):
        BertConfig.from_pretrained(tmp_path)
