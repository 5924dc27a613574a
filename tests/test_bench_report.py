"""benchmarks/report.py: docs/results/performance.md's results section comes from a results file, not by hand."""

from __future__ import annotations

import mmap

from benchmarks.common import add_fraction_of_peak, compare
from benchmarks.report import BEGIN, END, update


def _report(ratio: float) -> dict:
    row = {
        "name": "pretrain step BERT-mini",
        "ours_s": 1.0,
        "ref_s": ratio,
        "ours_per_s": 4000.0,
        "ref_per_s": 4000.0 / ratio,
        "unit": "tokens",
        "ratio": ratio,
        "goal": 3.0,
        "precision": "bf16",
        "ref_precision": "fp32",
        "model_flops_per_call": 50e9,
        "ours_peak_mb": 100.0,
        "ref_peak_mb": 300.0,
        "ours_kernel_share": 0.05,
        "ref_kernel_share": 0.4,
        "ours_minor_faults": 1200.0,
        "ref_minor_faults": 91000.0,
    }
    add_fraction_of_peak(
        row, {"fp32": {"flops_per_s": 100e9, "n": 2048}, "bf16": {"flops_per_s": 500e9, "n": 4096}}
    )
    env = {
        "cpu": "Test CPU",
        "cpu_count": 2,
        "isa_flags": ["avx512f", "amx_bf16"],
        "threads": 2,
        "omp_wait_policy": "PASSIVE",
        "load_average": [1.0, 1.0, 1.0],
        "python": "3.11",
        "torch": "2.13.0",
        "transformers": "5",
        "tokenizers": "0.23",
        "date": "2026-11-24 14:00:00",
        "commit": "abc1234",
        "gemm_peak": {"fp32": {"flops_per_s": 100e9, "n": 2048}},
        "kernel_choices": {"linear": "torch", "inference_precision:BertModel:22713216": "bf16"},
    }
    skipped = {"name": "gpu", "skipped": "no CUDA device"}
    return {
        "environment": env,
        "command": "python -m benchmarks.run",
        "seconds": 5,
        "results": [row, skipped],
    }


def test_fraction_of_peak_uses_each_sides_precision():
    row = _report(2.0)["results"][0]
    assert row["ours_fraction_of_peak"] == 50e9 / 1.0 / 500e9  # ours ran bf16: against the bf16 peak
    assert row["ref_fraction_of_peak"] == 50e9 / 2.0 / 100e9  # the reference ran fp32


def test_section_replaced_in_place_and_rest_kept(tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Perf\n\nintro\n\n{BEGIN}\nold table\n{END}\n\n## Method\nkept\n", encoding="utf-8")
    update(doc, _report(3.5), "bench/results.json")
    text = doc.read_text(encoding="utf-8")
    assert (
        "old table" not in text and text.startswith("# Perf\n\nintro") and text.endswith("## Method\nkept\n")
    )
    assert "Test CPU" in text and "abc1234" in text and "avx512f amx_bf16" in text
    assert "| **3.50** | ≥ 3.0 | 10% bf16 / 14% fp32 | 100 / 300 | 5% / 40% (1,200 / 91,000) |" in text
    assert "skipped: no CUDA device" in text
    assert "linear = torch, inference precision auto = bf16" in text
    update(doc, _report(2.0), "bench/results.json")  # a goal missed is marked, and only one section remains
    text = doc.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and "| 2.00 ✗ |" in text


def test_compare_counts_each_sides_page_faults():
    def fresh_pages() -> None:  # 64 MB mapped anew and touched page by page on every call: ~16k minor faults
        # (an anonymous mmap of its own, not malloc: a tensor's memory may come back from the allocator's free
        # lists, already faulted in, depending on what ran before in the process)
        size = 64 * 2**20
        pages = mmap.mmap(-1, size)
        pages[:: mmap.PAGESIZE] = b"\x01" * (size // mmap.PAGESIZE)
        pages.close()

    def arithmetic() -> None:
        sum(range(10_000))

    row = compare("faults", arithmetic, fresh_pages, repeats=3, memory=False)
    assert row["ref_minor_faults"] >= 16 and row["ref_minor_faults"] > 10 * row["ours_minor_faults"]
    assert 0.0 <= row["ours_kernel_share"] <= 1.0 and 0.0 <= row["ref_kernel_share"] <= 1.0


def test_gemm_peak_takes_the_faster_kernel_and_names_it(monkeypatch):
    """On AMD torch.mm runs MKL's generic path while oneDNN runs bertkit's linears about twice as fast: the
    peak must be the faster kernel's, or model rows read above 100% of it."""
    import torch

    import bertkit.kernels.gemm as gemm
    from benchmarks.common import gemm_peak

    r = gemm_peak(torch.float32, n=64, seconds=0.01)
    assert r["flops_per_s"] == max(r["per_kernel"].values()) == r["per_kernel"][r["kernel"]]
    if gemm.onednn_op() is not None:
        assert set(r["per_kernel"]) == {"torch.mm", "onednn"}
    monkeypatch.setattr(gemm, "onednn_op", lambda: None)  # a build without oneDNN: torch.mm alone
    r = gemm_peak(torch.float32, n=64, seconds=0.01)
    assert r["kernel"] == "torch.mm" and set(r["per_kernel"]) == {"torch.mm"}


def test_report_names_the_kernel_of_the_peak_when_the_run_recorded_it():
    from benchmarks.report import section

    old = section(_report(2.0), "old.json")
    assert "largest of repeated n×n×n `torch.mm`" in old and "fp32 100 GFLOP/s (n=2048)" in old
    new_run = _report(2.0)
    new_run["environment"]["gemm_peak"] = {"fp32": {"flops_per_s": 459e9, "n": 2048, "kernel": "onednn"}}
    text = section(new_run, "new.json")
    assert "the faster of `torch.mm` and oneDNN" in text and "fp32 459 GFLOP/s (onednn, n=2048)" in text


def _embed_run(seed: int, ratio: float, ours_mrr: float, ref_mrr: float) -> dict:
    report = _report(ratio)
    report["environment"]["commit"] = "def5678"
    report["results"] = [
        {
            "name": "train-embed MNRL",
            "ours": 30.0,
            "reference": 30.0 / ratio,
            "unit": "pairs/s",
            "ratio": ratio,
            "goal": 2.0,
            "seed": seed,
            "quality_ours": {"recall@1": 70.0, "mrr@10": ours_mrr},
            "quality_reference": {"recall@1": 71.0, "mrr@10": ref_mrr},
            "quality_untrained": {"recall@1": 69.0, "mrr@10": 79.0},
        }
    ]
    return report


def test_repeats_table_gives_every_runs_ratio_and_quality_and_their_mean(tmp_path):
    doc = tmp_path / "train-embed.md"
    doc.write_text(f"# T\n\n{BEGIN}\nold\n{END}\n", encoding="utf-8")
    runs = [("a/s1.json", _embed_run(1, 2.5, 80.0, 81.0)), ("a/s2.json", _embed_run(2, 1.5, 81.0, 80.0))]
    update(doc, _embed_run(0, 2.0, 79.0, 79.5), "a/s0.json", runs)
    text = doc.read_text(encoding="utf-8")
    assert (
        text.count(BEGIN) == 1
        and "`python -m benchmarks.report a/s0.json --also a/s1.json a/s2.json`" in text
    )
    assert (
        "| `s1.json` (seed 1, `def5678`) | train-embed MNRL | 2.50 | 70.00 / 71.00 (69.00) | 80.00 / 81.00 (79.00) |"
        in text
    )
    assert "| mean of 3 | train-embed MNRL | | 70.00 / 71.00 | 80.00 / 80.17 |" in text  # ours (79+80+81)/3
    update(doc, _embed_run(0, 2.0, 79.0, 79.5), "a/s0.json")  # without --also: no repeats table
    assert "mean of" not in doc.read_text(encoding="utf-8")


def test_repeats_table_compares_only_the_main_runs_rows_that_have_a_ratio(tmp_path):
    """An --also run with an ours-only row (no ratio) or a suite the main run lacks is read, not shown."""
    doc = tmp_path / "perf.md"
    doc.write_text(f"{BEGIN}\n{END}\n", encoding="utf-8")
    other = _embed_run(1, 2.5, 80.0, 81.0)
    other["results"] += [
        {"name": "pretrain BERT-base, ours only", "ours": 285.0, "unit": "tokens/s", "ratio": None},
        {"name": "tokenizer sst2", "ours": 9.0, "reference": 3.0, "unit": "texts/s", "ratio": 3.0},
    ]
    update(doc, _embed_run(0, 2.0, 79.0, 79.5), "a/s0.json", [("a/s1.json", other)])
    text = doc.read_text(encoding="utf-8")
    assert "| `s1.json` (seed 1, `def5678`) | train-embed MNRL | 2.50 |" in text
    assert "ours only" not in text and "tokenizer sst2" not in text


def test_per_core_speed_runs_on_one_thread_and_gives_the_threads_back(monkeypatch):
    """The experiment runner records one core's GEMM speed per sitting: measured on one thread whatever the
    sitting runs on, and the sitting's thread count is left as it was."""
    import torch

    import bertkit.kernels.peak as peak

    seen = []

    def spy(dtype, n, seconds):
        seen.append(torch.get_num_threads())
        return {"flops_per_s": 5e10}

    monkeypatch.setattr(peak, "gemm_peak", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert peak.per_core_gflops() == 50.0 and seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_repeats_table_of_speed_only_rows_has_no_quality_columns(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text(f"{BEGIN}\n{END}\n", encoding="utf-8")
    runs = []
    for commit, ratio in (("aaa1111", 1.87), ("bbb2222", 2.0)):
        report = _report(ratio)
        report["environment"]["commit"] = commit
        report["results"] = [
            {"name": "encoder sst2", "ours": 2.0 * ratio, "reference": 2.0, "unit": "seq/s", "ratio": ratio}
        ]
        runs.append((f"d/{commit}.json", report))
    update(doc, runs[0][1], runs[0][0], runs[1:])
    text = doc.read_text(encoding="utf-8")
    assert "| run | benchmark | ratio |\n| --- | --- | --- |\n" in text
    assert "| `aaa1111.json` (`aaa1111`) | encoder sst2 | 1.87 |" in text
    assert "| `bbb2222.json` (`bbb2222`) | encoder sst2 | 2.00 |" in text
    assert "recall@1" not in text and "seed" not in text


def _low_row(fraction: float, dtype: str = "fp32") -> dict:
    return {"name": "pretrain step BERT-mini", "ours_fraction_of_peak": fraction, "ours_peak_dtype": dtype,
            "gemm_shape": [64, 32, 64]}  # fmt: skip


def test_rows_under_half_the_peak_say_why_from_their_own_gemm_timed_alone(monkeypatch):
    import benchmarks.below_peak as bp

    env = {"gemm_peak": {"fp32": {"flops_per_s": 100e9}}, "load_average": [0.5], "threads": 2}
    monkeypatch.setattr(bp, "shape_flops", lambda m, k, n, dtype: 30e9)  # this shape alone: 30% of the peak
    small = _low_row(0.2)
    bp.explain(small, env)
    assert small["ours_shape_ceiling"] == 0.3
    assert "64x32x64, fp32) alone reaches only 30%" in small["below_half_reason"]
    assert "busy" not in small["below_half_reason"]

    monkeypatch.setattr(
        bp, "shape_flops", lambda m, k, n, dtype: 80e9
    )  # the GEMM is fine: time goes elsewhere
    outside = _low_row(0.4)
    bp.explain(outside, {**env, "load_average": [3.0]})
    assert (
        "reaches 80% of the peak, so about 50% of the step goes to work outside the GEMMs"
        in outside["below_half_reason"]
    )
    assert "the machine was busy (load 3.0 on 2 threads" in outside["below_half_reason"]

    fine = _low_row(0.6)
    bp.explain(fine, env)
    assert "below_half_reason" not in fine  # at or above half: nothing to explain


def test_without_a_local_measurement_the_reason_says_it_was_not_measured():
    import benchmarks.below_peak as bp

    row = _low_row(0.1)
    bp.explain(row, {"gemm_peak": {"fp32": {"flops_per_s": 1e9}}}, measure=False)
    assert (
        row["below_half_reason"] == "the cause is not measured here (the peaks came from another run's file)"
    )
    assert "ours_shape_ceiling" not in row


def test_shape_flops_times_a_real_product():
    from benchmarks.below_peak import shape_flops

    assert shape_flops(16, 8, 16, "fp32", seconds=0.01) > 0


def test_the_report_lists_the_rows_below_half_with_their_reason():
    from benchmarks.report import section

    report = _report(2.0)
    report["results"][0]["below_half_reason"] = "its largest GEMM alone reaches only 20% of the peak here"
    text = section(report, "bench/results.json")
    assert "Rows below half the GEMM peak of their precision, and why" in text
    assert "- pretrain step BERT-mini: 10% of the bf16 peak; its largest GEMM alone reaches only 20%" in text
