"""Pre-training defaults: the small-preset CPU recipe, the paper's values one flag away."""

from __future__ import annotations

import argparse

import pytest

from bertkit.errors import UserError
from bertkit.pretrain import PAPER_RECIPE, RECIPES, PretrainConfig


def _values(cfg: PretrainConfig) -> dict:
    r = cfg.with_recipe()
    return {"lr": r.lr, "warmup": r.warmup, "batch_size": r.batch_size, "masked_lm_prob": r.masked_lm_prob}


@pytest.mark.parametrize("preset", ["tiny", "mini", "small"])
def test_small_presets_default_to_the_cpu_recipe(preset):
    assert _values(PretrainConfig(preset=preset)) == RECIPES["cpu"][preset]
    assert RECIPES["cpu"][preset]["lr"] > PAPER_RECIPE["lr"]


def test_large_presets_and_recipe_paper_get_the_papers_values():
    assert _values(PretrainConfig(preset="base")) == PAPER_RECIPE
    assert _values(PretrainConfig(preset="tiny", recipe="paper")) == PAPER_RECIPE
    assert _values(PretrainConfig(preset="base", recipe="cpu")) == PAPER_RECIPE  # no cpu entry for base


def test_explicit_settings_win_and_bad_recipes_are_named():
    assert _values(PretrainConfig(preset="tiny", lr=3e-3, batch_size=8, masked_lm_prob=0.2)) == {
        "lr": 3e-3,
        "warmup": 0.06,
        "batch_size": 8,
        "masked_lm_prob": 0.2,
    }
    with pytest.raises(UserError, match="recipe must be"):
        PretrainConfig(preset="tiny", recipe="fast").with_recipe()


def test_cli_flag_reaches_the_config(tmp_path):
    from bertkit.cli.pretrain import config_from_args

    ns = argparse.Namespace(
        config=None, data=str(tmp_path), out=str(tmp_path / "o"), preset="mini", recipe="paper"
    )
    cfg = config_from_args(ns)
    assert cfg.recipe == "paper" and cfg.lr is None and _values(cfg) == PAPER_RECIPE


def test_the_cap_on_masked_tokens_follows_the_rate_and_length_unless_set():
    from bertkit.pretrain import max_predictions_for

    assert max_predictions_for(0.15, 128) == 20  # the original release's value for its 128-token phase
    assert PretrainConfig(preset="tiny").with_recipe().max_predictions_per_seq == 52  # 40% of 128
    assert PretrainConfig(preset="tiny", recipe="paper").with_recipe().max_predictions_per_seq == 20
    assert PretrainConfig(preset="tiny", max_seq_length=64).with_recipe().max_predictions_per_seq == 27
    assert PretrainConfig(preset="tiny", max_predictions_per_seq=7).with_recipe().max_predictions_per_seq == 7
    two = PretrainConfig(preset="base", phases=[{"steps": 9}, {"steps": 1, "max_seq_length": 512,
                                                               "max_predictions_per_seq": 80}]).with_recipe()  # fmt: skip
    assert [ph["max_predictions_per_seq"] for ph in two.resolved_phases()] == [20, 80]


def test_the_paper_recipe_masks_fifteen_percent_and_the_cpu_recipe_more():
    assert PAPER_RECIPE["masked_lm_prob"] == 0.15
    assert all(r["masked_lm_prob"] > 0.15 for r in RECIPES["cpu"].values())
    # phases resolve through the recipe too, whether or not with_recipe() ran first
    raw = PretrainConfig(preset="tiny").resolved_phases()[0]
    assert (raw["masked_lm_prob"], raw["max_predictions_per_seq"]) == (0.4, 52)
