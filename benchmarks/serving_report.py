"""docs/serving-measurements.md from the files the serving benchmarks wrote (regenerate, never retype):

.venv/bin/python -m benchmarks.bench_serve --threads 2 --out docs/serving-bench.json
.venv/bin/python -m benchmarks.bench_int8 --threads 2 --out docs/serving-int8.json
.venv/bin/python -m benchmarks.serving_report
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _env(d: dict) -> str:
    e = d["environment"]
    when, load = (
        ("started", e["load_average_before"]) if "load_average_before" in e else ("ended", e["load_average"])
    )
    return (
        f"`{d['command']}` at commit {d['commit']} on {e['cpu']} ({e['cpu_count']} cores), torch {e['torch']}; "
        f"load average {load[0]:.1f} on {e['cpu_count']} cores when it {when} (the machine was shared with other "
        "jobs: indicative only)"
    )


def main() -> None:
    lines = [
        "# Serving: measurements",
        "",
        "Written by `python -m benchmarks.serving_report` from the files below.",
        "",
    ]
    bench = DOCS / "serving-bench.json"
    if bench.is_file():
        d = json.loads(bench.read_text())
        lines += [
            "## `/embed` on loopback (`docs/serving-bench.json`)",
            "",
            _env(d) + ".",
            "",
            "One STS-B dev sentence per request, all-MiniLM-L6-v2; requests/s (median of rounds), p50 / p99 latency in ms "
            "(p99: the worst round), errors and lost requests summed over rounds. Ratio: bertkit with batching over the "
            "baseline (sentence-transformers `encode` behind FastAPI, one request at a time).",
            "",
            "| concurrency | bertkit, batching | bertkit, no batching | baseline | ratio | errors / lost |",
            "|---|---|---|---|---|---|",
        ]
        for r in d["rows"]:
            if "ours" not in r:
                lines.append(f"| {r['name']} | {r.get('error') or r.get('skipped')} | | | | |")
                continue
            o, n, b = r["ours"], r["no_batching"], r["baseline"]

            def cell(x: dict) -> str:
                return f"{x['req_per_s']:.1f} req/s, {x['p50_ms']:.0f} / {x['p99_ms']:.0f} ms"

            errs = sum(x["errors"] for x in (o, n, b))
            lost = sum(x["lost"] for x in (o, n, b))
            c = r["name"].split("c=")[-1]
            lines.append(f"| {c} | {cell(o)} | {cell(n)} | {cell(b)} | {r['ratio']:.2f} | {errs} / {lost} |")
        goal = [r for r in d["rows"] if "meets_goal" in r]
        if goal:
            lines += [
                "",
                f"Goal (>= 3x the baseline at c=64 with p99 no worse): {'met' if goal[0]['meets_goal'] else 'not met'} in this run.",
            ]
        lines.append("")
    int8 = DOCS / "serving-int8.json"
    if int8.is_file():
        d = json.loads(int8.read_text())
        f, q = d["float"], d["int8"]
        lines += [
            "## `--int8` (`docs/serving-int8.json`)",
            "",
            _env({**d, "environment": d["environment"]}) + ".",
            "",
            f"all-MiniLM-L6-v2, all {d['sentences']} STS-B dev sentences through the service; Spearman x 100 of the "
            f"cosines over the {d['pairs']} pairs.",
            "",
            "| | size (state dict) | sentences/s | STS-B dev Spearman |",
            "|---|---|---|---|",
            f"| float (bertkit's forward) | {f['bytes'] / 1e6:.1f} MB | {f['sentences_per_s']:.1f} | {f['sts_b_dev_spearman']:.2f} |",
            f"| int8 (dynamic, StaticBert) | {q['bytes'] / 1e6:.1f} MB | {q['sentences_per_s']:.1f} | {q['sts_b_dev_spearman']:.2f} |",
        ]
        for name, label in (
            ("onnx_float", "ONNX float (onnxruntime)"),
            ("onnx_int8", "ONNX int8 (`export onnx --int8`)"),
        ):
            if name in d:
                x = d[name]
                lines.append(
                    f"| {label} | {x['bytes'] / 1e6:.1f} MB (file) | {x['sentences_per_s']:.1f} | {x['sts_b_dev_spearman']:.2f} |"
                )
        lines += [
            "",
            f"Size {d['size_ratio']:.2f}x smaller (the word embeddings stay float), speed {d['speedup']:.2f}x, Spearman "
            f"{d['spearman_change']:+.2f}; largest difference of a unit vector's component {d['max_abs_diff']:.3f}.",
            "",
        ]
        if "onnx_int8" in d:
            lines += [
                f"ONNX: int8 file {d['onnx_size_ratio']:.2f}x smaller, {d['onnx_speedup']:.2f}x the float graph's speed, "
                f"Spearman {d['onnx_spearman_change']:+.2f}.",
                "",
            ]
    out = DOCS / "serving-measurements.md"
    from bertkit.io import atomic_write

    with atomic_write(out) as fh:
        fh.write("\n".join(lines))
    print(out)


if __name__ == "__main__":
    main()
