"""benchmarks.step_cost: what a pre-training step costs at each precision, with the losses side by side."""

from __future__ import annotations

import json

from benchmarks.step_cost import main


def test_step_cost_times_each_precision_on_the_same_run_and_writes_json(tiny_data, tmp_path, capsys):
    out = tmp_path / "cost.json"
    main(["--data", str(tiny_data), "--preset", "tiny", "--objective", "electra", "--steps", "20",
          "--batch-size", "4", "--max-seq-length", "64", "--precisions", "fp32", "bf16", "--out", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    assert [r["precision"] for r in report["rows"]] == ["fp32", "bf16"]
    assert report["objective"] == "electra" and report["command"].startswith(
        "python -m benchmarks.step_cost --data"
    )
    for row in report["rows"]:
        assert row["steps_timed"] == 10 and row["cpu_s_per_step"] > 0 and row["wall_s_per_step"] > 0
        assert len(row["loss_every_10_steps"]) == 2
    fp32, bf16 = (r["loss_every_10_steps"][0] for r in report["rows"])
    assert fp32 != bf16 and abs(fp32 - bf16) < 0.05 * fp32  # the same run from the same seed, rounded apart
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
