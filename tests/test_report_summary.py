"""The report's [summary] table: seed means per model and task, and the average a decision rule names,
computed from the result files (blank until each of its tasks has a score); a malformed table is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bertkit.errors import UserError
from lab.experiment.lists import check_summary
from lab.report.summary import average_score, pair_line, summary_table

TASKS = [{"name": "SST-2"}, {"name": "STS-B"}, {"name": "CoLA"}]


def _results() -> dict[str, dict]:
    return {
        "finetune/a/SST-2/seed1": {"primary": 80.0},
        "finetune/a/SST-2/seed2": {"primary": 82.0},
        "finetune/a/STS-B/seed1": {"primary": 40.0},
        "finetune/a/STS-B/lr0.0001/seed1": {"primary": 99.0},  # a grid cell: not a seed score
        "finetune/b/SST-2/seed1": {"primary": 70.0},
    }


def test_the_average_is_of_seed_means_and_waits_for_every_task():
    assert average_score(_results(), "a", ["SST-2", "STS-B"]) == pytest.approx((81.0 + 40.0) / 2)
    assert average_score(_results(), "b", ["SST-2", "STS-B"]) is None
    assert average_score(_results(), "a", []) is None


def test_the_table_has_a_row_per_model_and_the_average_column():
    spec = {"models": ["b", "a"], "tasks": ["SST-2", "STS-B"], "average": ["SST-2", "STS-B"]}
    matrix = SimpleNamespace(raw={"summary": spec, "task": TASKS, "seeds": [1, 2]})
    lines = summary_table(matrix, _results())
    rows = [line for line in lines if line.startswith("| a |") or line.startswith("| b |")]
    assert rows[0].startswith("| b |") and rows[0].endswith("|  |")  # no STS-B yet: no average
    assert rows[1] == "| a | 81.0 ± 1.4 | 40.0 (1/2 seeds) | 60.5 (seeds missing) |"
    whole = {**_results(), "finetune/a/STS-B/seed2": {"primary": 42.0}}
    assert "| a | 81.0 ± 1.4 | 41.0 ± 1.4 | 61.0 |" in summary_table(matrix, whole)
    assert "average of SST-2, STS-B" in lines[lines.index(rows[0]) - 2]
    assert summary_table(SimpleNamespace(raw={}), _results()) == []


@pytest.mark.parametrize(
    "spec, says",
    [
        ([1, 2], "must be a table"),
        ({"models": ["a"], "tasks": ["SST-2"], "mean": ["SST-2"]}, "unknown keys ['mean']"),
        ({"models": ["a"], "tasks": ["QNLI"]}, "tasks names ['QNLI']"),
        ({"models": ["z"], "tasks": ["SST-2"]}, "models names ['z']"),
        ({"models": ["a"], "tasks": ["SST-2"], "average": "SST-2"}, "average must be a list"),
        ({"models": ["a"]}, "needs models and tasks"),
        (
            {"models": ["a"], "tasks": ["SST-2"], "pairs": [["a", "z"]]},
            "pairs must be a list of [model, model]",
        ),
        (
            {"models": ["a"], "tasks": ["SST-2"], "pairs": ["a", "b"]},
            "pairs must be a list of [model, model]",
        ),
    ],
)
def test_a_malformed_summary_is_refused_naming_the_config(spec, says):
    with pytest.raises(UserError, match=r"study\.toml: \[summary\] .*") as err:
        check_summary(spec, {"SST-2", "STS-B"}, {"a", "b"}, "study.toml")
    assert says in str(err.value)


def test_a_pair_line_counts_tasks_beyond_the_spread_and_names_the_missing():
    res = {
        **{f"finetune/a/SST-2/seed{k}": {"primary": x} for k, x in ((1, 80.0), (2, 81.0))},
        **{f"finetune/b/SST-2/seed{k}": {"primary": x} for k, x in ((1, 70.0), (2, 71.0))},
        **{f"finetune/a/STS-B/seed{k}": {"primary": x} for k, x in ((1, 40.0), (2, 50.0))},
        **{
            f"finetune/b/STS-B/seed{k}": {"primary": x} for k, x in ((1, 44.0), (2, 45.0))
        },  # within a's spread
        **{f"finetune/a/CoLA/seed{k}": {"primary": x} for k, x in ((1, 1.0), (2, 2.0))},
        **{f"finetune/b/CoLA/seed{k}": {"primary": x} for k, x in ((1, 9.0), (2, 10.0))},
    }
    line = pair_line(res, "a", "b", ["SST-2", "STS-B", "CoLA", "MRPC"])
    assert line.startswith("- a against b, on the 3 of 4 tasks both have: +0.8 points on average;")
    assert "ahead beyond the seeds' spread on 1 (SST-2)" in line and "behind beyond it on 1 (CoLA)" in line
    assert line.endswith("not both run yet: MRPC.")
    assert pair_line({}, "a", "b", ["SST-2"]) == "- a against b: no task has scores for both yet."


def test_a_cell_outside_the_plan_is_a_dash_and_pair_lines_leave_it_out():
    tasks = [{"name": "SST-2", "models": ["a", "b"]}, {"name": "STS-B", "models": ["a"]}]
    spec = {"models": ["a", "b"], "tasks": ["SST-2", "STS-B"], "pairs": [["a", "b"]]}
    matrix = SimpleNamespace(raw={"summary": spec, "task": tasks, "seeds": [1, 2]})
    lines = summary_table(matrix, _results())
    assert "| b | 70.0 (1/2 seeds) | — |" in lines  # b is never fine-tuned on STS-B: not "not yet run"
    assert "| a | 81.0 ± 1.4 | 40.0 (1/2 seeds) |" in lines
    (pair,) = [line for line in lines if line.startswith("- a against b")]
    assert pair.startswith("- a against b, on the 1 of 1 tasks both have:") and "not both run yet" not in pair
    assert pair.endswith("(not planned for both: STS-B).")
