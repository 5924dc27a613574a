"""docs/results/serving-measurements.md from the files the serving benchmarks wrote (regenerate, never retype):

.venv/bin/python -m benchmarks.bench_serve --threads 2 --out docs/results/serving-bench.json
.venv/bin/python -m benchmarks.bench_int8 --threads 1 --repeats 3 --out docs/results/serving-int8.json
.venv/bin/python -m experiments.serve_parity --model DIR --work W --out experiments/results/serve-parity/NAME.json
.venv/bin/python -m benchmarks.serving_report
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "results"
PARITY = ROOT / "experiments" / "results" / "serve-parity"


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


def _without_port(cmd: list[str]) -> str:
    """The server command without its (random, free) ``--port N``."""
    i = cmd.index("--port") if "--port" in cmd else len(cmd)
    return " ".join(cmd[:i] + cmd[i + 2 :])


def parity_section() -> list[str]:
    """/qa and /ner against the fine-tuning runs' own evaluation (experiments/serve_parity.py)."""
    files = sorted(PARITY.glob("*.json"))
    if not files:
        return []
    lines = [
        "## `/qa` and `/ner` against the fine-tuning evaluation (`experiments/results/serve-parity/`)",
        "",
        "Each model fine-tuned by `bertkit finetune squad` (SQuAD v1.1 dev, article split) and `bertkit finetune ner` "
        "(CoNLL-2003), then served by `bertkit serve` in a subprocess; every dev question / sentence sent over HTTP. "
        "Scores from the route outputs (official SQuAD v1.1 metric, conlleval) beside the run's own.",
        "",
        "| model | task | dev examples | fine-tuning eval | served over HTTP | differing examples | HTTP errors |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for path in files:
        d = json.loads(path.read_text())
        name = Path(d["model"]).parent.name if Path(d["model"]).name == "model" else Path(d["model"]).name
        if "squad" in d:
            r = d["squad"]
            lines.append(
                f"| {name} | SQuAD v1.1 | {r['questions']} questions | EM {r['finetune']['exact']:.2f} / F1 "
                f"{r['finetune']['f1']:.2f} | EM {r['served_metrics']['exact']:.2f} / F1 {r['served_metrics']['f1']:.2f} "
                f"| {len(r['mismatches'])} | {len(r['errors'])} |"
            )
        if "ner" in d:
            r = d["ner"]
            lines.append(
                f"| {name} | CoNLL-2003 valid | {r['sentences']} sentences | entity F1 {100 * r['finetune']['f1']:.2f} "
                f"| entity F1 {100 * r['served_metrics']['f1']:.2f} | {len(r['mismatches'])} | {len(r['errors'])} |"
            )
        notes.append(
            f"`{path.relative_to(ROOT)}`: `{d['command']}` at commit {d['commit']} on {d['cpu']}, torch {d['torch']}; "
            f"{'equal' if d['equal'] else 'NOT equal'}."
        )
        for k in ("squad", "ner"):
            if k in d:
                when = (
                    "run by this invocation"
                    if d[k].get("finetune_ran_now")
                    else "a finished run in --work, reused"
                )
                notes.append(f"  - fine-tuning ({when}): `{' '.join(d[k]['finetune_command'])}`; served with "
                             f"`{_without_port(d[k]['server'])}`"
                             + (f" and `{json.dumps(d[k]['request_fields'])}` in every request" if "request_fields" in d[k] else "")
                             + ".")  # fmt: skip
    return [*lines, "", *notes, ""]


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
            "## `/embed` on loopback (`docs/results/serving-bench.json`)",
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
        f = d["float"]
        lines += [
            "## `--int8` (`docs/results/serving-int8.json`)",
            "",
            _env({**d, "environment": d["environment"]}) + ".",
            "",
            f"all-MiniLM-L6-v2, all {d['sentences']} STS-B dev sentences through the service; Spearman x 100 of the "
            f"cosines over the {d['pairs']} pairs.",
            "",
            f"Timing: {d['timing']}; {d['threads']} torch thread(s)." if "timing" in d else "",
            "",
            "| | size (state dict) | sentences/s | STS-B dev Spearman |",
            "|---|---|---|---|",
            f"| float (bertkit's forward) | {f['bytes'] / 1e6:.1f} MB | {f['sentences_per_s']:.1f} | {f['sts_b_dev_spearman']:.2f} |",
        ]
        for name in [k for k in d if k == "int8" or k.startswith("int8_")]:
            x = d[name]
            engine = (
                f", weights packed for {x['engine']}" + ("; `--int8-engine auto`" if name == "int8" else "")
                if "engine" in x
                else ""
            )
            lines.append(
                f"| `serve --int8` (dynamic{engine}) | {x['bytes'] / 1e6:.1f} MB | {x['sentences_per_s']:.1f} | {x['sts_b_dev_spearman']:.2f} |"
            )
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
            f"{d['spearman_change']:+.2f}; largest difference of a unit vector's component {d['max_abs_diff']:.3f}"
            + (f", smallest cosine of an int8 sentence vector to its float one {d['int8']['min_cosine_to_float']:.3f}"
               if "min_cosine_to_float" in d["int8"] else "") + ".",
            "",
        ]  # fmt: skip
        others = [k for k in d if k.startswith("int8_") and "speedup" in d[k]]
        if others:
            lines += [
                "; ".join(f"{k}: {d[k]['speedup']:.2f}x the float speed, Spearman "
                          f"{d[k]['sts_b_dev_spearman'] - f['sts_b_dev_spearman']:+.2f}" for k in others) + ".",
                "",
            ]  # fmt: skip
        if "onnx_int8" in d:
            lines += [
                f"ONNX: int8 file {d['onnx_size_ratio']:.2f}x smaller, {d['onnx_speedup']:.2f}x the float graph's speed, "
                f"Spearman {d['onnx_spearman_change']:+.2f}.",
                "",
            ]
    lines += parity_section()
    out = DOCS / "serving-measurements.md"
    from bertkit.io import atomic_write

    with atomic_write(out) as fh:
        fh.write("\n".join(lines))
    print(out)


if __name__ == "__main__":
    main()
