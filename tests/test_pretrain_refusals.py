"""pretrain refuses, in one line that says how to fix it: a device this machine lacks (from a config file too),
a held-out split that leaves less than one global batch, and --init-from a model of another vocabulary."""

from __future__ import annotations

import pytest
import torch

from bertkit.errors import UserError
from bertkit.pretrain import PretrainConfig, pretrain

TINY = dict(hidden_size=64, num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)


def _cfg(data, out, **kw) -> PretrainConfig:
    base = dict(data=str(data), out=str(out), preset="tiny", model_overrides=TINY, steps=2, batch_size=4,
                max_seq_length=64, progress=False, num_threads=1, checkpoint_every=0, eval_batches=0)  # fmt: skip
    return PretrainConfig(**{**base, **kw})


@pytest.mark.parametrize("device, match", [("bogus", "is not a device"), ("cuda:7", "CUDA|device")])
def test_a_device_this_machine_lacks_is_one_line(tmp_path, tiny_data, device, match):
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has that many GPUs")
    with pytest.raises(UserError, match=match):
        pretrain(_cfg(tiny_data, tmp_path / "r", device=device))


def test_a_held_out_split_that_leaves_less_than_one_batch_says_so(tmp_path, tiny_data):
    import json

    docs = json.loads((tiny_data / "manifest.json").read_text())["documents"]
    with pytest.raises(UserError, match=r"fewer than one global batch of 64 \(\d+ documents are held out"):
        pretrain(_cfg(tiny_data, tmp_path / "r", batch_size=64, valid_documents=docs - 1))


def test_init_from_a_model_of_another_vocabulary_is_refused(tmp_path, tiny_data):
    from bertkit.config import BertConfig
    from bertkit.heads.pretraining import BertForPreTraining

    other = tmp_path / "other"
    BertForPreTraining(BertConfig.preset("tiny", vocab_size=77, **TINY)).save_pretrained(other)
    with pytest.raises(UserError, match="its vocabulary has 77 entries"):
        pretrain(_cfg(tiny_data, tmp_path / "r", init_from=str(other)))


def test_the_model_card_names_the_shape_a_model_table_gave(tmp_path, tiny_data):
    pretrain(_cfg(tiny_data, tmp_path / "r", eval_batches=0))
    card = (tmp_path / "r" / "model" / "README.md").read_text(encoding="utf-8")
    assert "tiny, changed to L2/H64/A2 by [model] hidden_size=64" in card
