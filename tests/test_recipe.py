"""Pre-training defaults: the small-preset CPU recipe, the paper's values one flag away."""

from __future__ import annotations

import argparse

import pytest

from bertkit.errors import UserError
from bertkit.pretrain import PAPER_RECIPE, RECIPES, PretrainConfig


def _values(cfg: PretrainConfig) -> dict:
    r = cfg.with_recipe()
    return {"lr": r.lr, "warmup": r.warmup, "batch_size": r.batch_size}


@pytest.mark.parametrize("preset", ["tiny", "mini", "small"])
def test_small_presets_default_to_the_cpu_recipe(preset):
    assert _values(PretrainConfig(preset=preset)) == RECIPES["cpu"][preset]
    assert RECIPES["cpu"][preset]["lr"] > PAPER_RECIPE["lr"]


def test_large_presets_and_recipe_paper_get_the_papers_values():
    assert _values(PretrainConfig(preset="base")) == PAPER_RECIPE
    assert _values(PretrainConfig(preset="tiny", recipe="paper")) == PAPER_RECIPE
    assert _values(PretrainConfig(preset="base", recipe="cpu")) == PAPER_RECIPE  # no cpu entry for base


def test_explicit_settings_win_and_bad_recipes_are_named():
    assert _values(PretrainConfig(preset="tiny", lr=3e-3, batch_size=8)) == {
        "lr": 3e-3,
        "warmup": 0.06,
        "batch_size": 8,
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
