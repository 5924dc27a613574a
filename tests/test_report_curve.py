"""The report's quality-per-CPU-hour curve: chains of continued pre-training add up their CPU-hours, scores are
means over seeds, and the figure is written beside the page."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bertkit.errors import UserError
from lab.report.curve import chain_cpu_hours, curve_points, quality_curve


def _results() -> dict[str, dict]:
    return {
        "pretrain/a": {"train_cpu_s": 3600.0},
        "pretrain/b": {"train_cpu_s": 7200.0, "continued_from": "a"},
        "pretrain/c": {"train_cpu_s": 100.0, "continued_from": "missing"},
        "finetune/a/SST-2/seed1": {"primary": 70.0},
        "finetune/a/SST-2/seed2": {"primary": 72.0},
        "finetune/b/SST-2/seed1": {"primary": 80.0},
        "finetune/b/SST-2/lr0.0001/seed1": {"primary": 10.0},  # a grid cell: not a seed score
    }


def test_a_chain_adds_up_the_cpu_hours_of_its_links():
    res = _results()
    assert chain_cpu_hours(res, "a") == 1.0 and chain_cpu_hours(res, "b") == 3.0
    assert chain_cpu_hours(res, "c") is None  # a link without a result: no point rather than a wrong one


def test_points_are_seed_means_in_cpu_order_and_the_figure_is_written(tmp_path):
    spec = {"models": ["b", "a", "c"], "tasks": ["SST-2", "STS-B"], "anchors": {"SST-2": {"Tiny": 83.2}}}
    points = curve_points(_results(), spec)
    assert [(m, h, ms[0], kind) for m, h, ms, kind in points["SST-2"]] == [
        ("a", 1.0, 71.0, "chain"),
        ("b", 3.0, 80.0, "chain"),
    ]
    assert points["STS-B"] == []
    lines = quality_curve(SimpleNamespace(raw={"curve": spec}), _results(), tmp_path / "page.md")
    assert (
        "| b | chain | SST-2 | 3.00 | 80.0 ± 0.0 |" in lines
        and "![quality per CPU-hour](page-curve.png)" in lines
    )
    assert (tmp_path / "page-curve.png").stat().st_size > 1000


def test_no_curve_table_no_section(tmp_path):
    assert quality_curve(SimpleNamespace(raw={}), _results(), tmp_path / "page.md") == []
    empty = quality_curve(
        SimpleNamespace(raw={"curve": {"models": ["z"], "tasks": ["SST-2"]}}), {}, tmp_path / "p.md"
    )
    assert "No point yet" in " ".join(empty) and not (tmp_path / "p-curve.png").exists()


def test_the_random_init_starts_the_chain_and_one_schedule_models_stand_beside_it(tmp_path):
    """``start``: the chain's random init at 0 CPU-hours (it has no training time); ``beside``: models of one
    schedule at their own CPU-hours, told apart in the table and drawn apart in the figure."""
    res = {**_results(), "pretrain/random": {"tokens": 0}, "finetune/random/SST-2/seed1": {"primary": 60.0},
           "pretrain/long": {"train_cpu_s": 9000.0}, "finetune/long/SST-2/seed1": {"primary": 85.0}}  # fmt: skip
    spec = {"models": ["a", "b"], "tasks": ["SST-2"], "start": "random", "beside": ["long"]}
    points = curve_points(res, spec)["SST-2"]
    assert [(m, h, kind) for m, h, _, kind in points] == [
        ("random", 0.0, "random init"),
        ("a", 1.0, "chain"),
        ("long", 2.5, "one schedule"),
        ("b", 3.0, "chain"),
    ]
    lines = quality_curve(SimpleNamespace(raw={"curve": spec}), res, tmp_path / "page.md")
    assert "| random | random init | SST-2 | 0.00 | 60.0 ± 0.0 |" in lines
    assert "| long | one schedule | SST-2 | 2.50 | 85.0 ± 0.0 |" in lines
    assert (tmp_path / "page-curve.png").stat().st_size > 1000


def test_an_unknown_curve_key_is_one_line_naming_it():
    with pytest.raises(UserError, match=r"\[curve\]: unknown key\(s\) strat"):
        curve_points(_results(), {"models": ["a"], "tasks": ["SST-2"], "strat": "random"})


def test_the_published_anchors_are_named_in_the_legend_with_their_lines(tmp_path, monkeypatch):
    """Each anchor is a dashed line named in its panel's legend (text beside the line ran into the points'
    labels), the higher anchor first; a panel without anchors or one-schedule points still has its legend."""
    import matplotlib.figure

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    res = {**_results(), "finetune/a/STS-B/seed1": {"primary": 40.0}}
    spec = {"models": ["a", "b"], "tasks": ["SST-2", "STS-B"],
            "anchors": {"SST-2": {"Tiny": 83.2, "Mini": 85.9}}}  # fmt: skip
    quality_curve(SimpleNamespace(raw={"curve": spec}), res, tmp_path / "page.md")
    sst2, stsb = drawn[0].axes
    assert [t.get_text() for t in sst2.get_legend().get_texts()] == [
        "Mini: 85.9",
        "Tiny: 83.2",
        "bertkit chain",
    ]
    assert sorted(
        line.get_ydata()[0] for line in sst2.get_lines() if line.get_label().startswith(("Mini", "Tiny"))
    ) == [83.2, 85.9]
    assert [t.get_text() for t in stsb.get_legend().get_texts()] == ["bertkit chain"]
    assert all(
        "Tiny" not in t.get_text() for ax in (sst2, stsb) for t in ax.texts
    )  # no text beside the lines
