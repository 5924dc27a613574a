"""Markdown reports written only from :mod:`bertkit.experiment` result files (never typed by hand).

``bertkit experiment report CONFIG.toml [--results DIR] [--doc FILE]`` reads the matrix (for its layout and
commands) and every result file, and writes the report named by the config's ``report`` key (or ``--doc``)
plus its PNG figures beside it. ``report_kind = "paper"`` gives the paper's Tables 5, 6 and 7 in the paper's
shape, the same-budget comparison with transformers, the pre-training curves, a bar chart and the BERT-Base
estimate; ``report_kind = "results"`` a table of fine-tuning rows (docs/results.md). A cell without a result
file shows "not yet run"; each finding says whether it reproduces at this scale.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.experiment import (
    TABLE5_ROLES,
    Matrix,
    features_name,
    load_matrix,
    read_results,
    results_dir,
    seeds_of,
    task_models,
)
from bertkit.io import atomic_write

NOT_RUN = "not yet run"

# The paper's numbers (Devlin et al. 2019, dev sets), shown for reference beside ours.
PAPER_TABLE5 = {  # MNLI-m, QNLI, MRPC (F1), SST-2 (acc), SQuAD v1.1 (F1); BERT-Base
    "columns": ["MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD"],
    "rows": {
        "BERT-Base (MLM + NSP)": [84.4, 88.4, 86.7, 92.7, 88.5],
        "No NSP": [83.9, 84.9, 86.5, 92.6, 87.9],
        "LTR & No NSP": [82.1, 84.3, 77.5, 92.1, 77.8],
        "+ BiLSTM": [82.1, 84.1, 75.7, 91.6, 84.9],
    },
}
PAPER_TABLE6 = [  # L, H, A, held-out MLM perplexity, MNLI-m, MRPC, SST-2
    (3, 768, 12, 5.84, 77.9, 79.8, 88.4),
    (6, 768, 3, 5.24, 80.6, 82.2, 90.7),
    (6, 768, 12, 4.68, 81.9, 84.8, 91.3),
    (12, 768, 12, 3.99, 84.4, 86.7, 92.9),
    (12, 1024, 16, 3.54, 85.7, 86.9, 93.3),
    (24, 1024, 16, 3.23, 86.6, 87.8, 93.7),
]
PAPER_TABLE7 = {  # CoNLL-2003 dev F1, BERT-Base features
    "fine-tuning": 96.4,
    "embeddings": 91.0,
    "second-to-last-hidden": 95.6,
    "last-hidden": 94.9,
    "weighted-sum-last-four": 95.9,
    "concat-last-four": 96.1,
    "weighted-sum-all": 95.5,
}
ROW_LABELS = {"mlm+nsp": "MLM + NSP (BERT)", "mlm": "MLM only (No NSP)", "ltr": "LTR & No NSP",
              "ltr+bilstm": "LTR & No NSP + BiLSTM", "random": "random init (no pre-training)",
              "transformers-mlm": "transformers' pipeline, MLM only"}  # fmt: skip
METRIC_NAMES = {"SST-2": "acc", "CoLA": "MCC", "MRPC": "F1", "STS-B": "Spearman", "CoNLL-2003": "F1",
                "SQuAD-v1.1": "F1", "SQuAD-v2.0": "F1"}  # fmt: skip
KIND_METRICS = {
    "ner": "F1",
    "squad": "F1",
}  # a task named otherwise (a variant of CoNLL or SQuAD): its kind's metric


# The main protocol's heading where another protocol is Table 5's (``table5_protocol``)
SHORT_PROTOCOL = "Short fine-tuning (the main protocol: a slice of each training set for a few hundred steps)"


def metric_name(matrix: Matrix, task: str, default: str = "") -> str:
    """The metric of the matrix's task ``task``: its GLUE/CoNLL/SQuAD name's, else (a variant such as
    SST-2-1k or CoNLL-2003-high-lr) the task it varies (``task = ...``) or its kind's."""
    spec = next((t for t in matrix.raw.get("task", []) if t.get("name") == task), {})
    return (
        METRIC_NAMES.get(task)
        or METRIC_NAMES.get(spec.get("task", ""))
        or KIND_METRICS.get(spec.get("kind", ""))
        or spec.get("metric", default)
    )


# ------------------------------------------------------------------------------------------------ numbers


def seed_scores(results: dict[str, dict], model: str, task: str) -> list[float]:
    """The primary score of every finished seed cell ``finetune/<model>/<task>/seed<k>``."""
    pre = f"finetune/{model}/{task}/seed"
    return [
        r["primary"] for n, r in sorted(results.items()) if n.startswith(pre) and r.get("primary") is not None
    ]


def mean_std(xs: list[float]) -> tuple[float, float] | None:
    if not xs:
        return None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def fmt(ms: tuple[float, float] | None, n: int | None = None, expected: int | None = None) -> str:
    """``mean ± std`` (with ``(n/N seeds)`` when not all seeds are in), the score alone for a single seed
    (a spread of one run is not zero, it is unknown), or "not yet run"."""
    if ms is None:
        return NOT_RUN
    s = f"{ms[0]:.1f}" if n == 1 else f"{ms[0]:.1f} ± {ms[1]:.1f}"
    if n is not None and expected and n < expected:
        s += f" ({n}/{expected} seeds)"
    return s


def beyond_spread(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two (mean, std) scores differ by more than the seeds' spread (the larger of the two stds): the
    one rule every verdict of the report uses."""
    return abs(a[0] - b[0]) > max(a[1], b[1])


def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether score ``a`` is above ``b`` by more than the seeds' spread: the "reproduces" of a finding."""
    return a[0] > b[0] and beyond_spread(a, b)


def table5_models(matrix: Matrix) -> dict[str, str]:
    """Role -> model name of Table 5's rows (and of every finding that compares them): the config's
    ``table5 = {role = "model"}`` where it names one, else ``<role>-<report_size>`` (``mlm+nsp-mini``)."""
    size = matrix.raw.get("report_size", "mini")
    named = matrix.raw.get("table5") or {}
    return {role: named.get(role, f"{role}-{size}") for role in TABLE5_ROLES}


def table6_models(matrix: Matrix) -> list[str]:
    """Table 6's models (one per size): the config's ``table6 = [...]``, else every ``mlm+nsp-<size>`` model."""
    named = matrix.raw.get("table6")
    if named:
        return list(named)
    return [m["name"] for m in matrix.raw["model"] if _model_base(m["name"])[0] == "mlm+nsp"]


def _model_base(name: str) -> tuple[str, str]:
    """("mlm+nsp", "mini") from "mlm+nsp-mini"."""
    base, _, size = name.rpartition("-")
    return base, size


# ------------------------------------------------------------------------------------------------ figures


def plot_curves(results: dict[str, dict], path: Path) -> bool:
    """Pre-training curves of every pre-training cell on one PNG (MLM loss, MLM accuracy, NSP accuracy
    against tokens seen); False when there is nothing to plot."""
    runs = [
        (r["model"], r["curve"])
        for n, r in sorted(results.items())
        if n.startswith("pretrain/") and r.get("curve")
    ]
    if not runs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("masked_lm_loss", "MLM loss (train; LTR: next-token loss)"), ("masked_lm_accuracy", "MLM accuracy (train)"),
              ("next_sentence_accuracy", "NSP accuracy (train)")]  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (key, title) in zip(axes, panels):
        for model, curve in runs:
            pts = [
                (p["tokens"] / 1e6, p.get(key, p.get("loss") if key == "masked_lm_loss" else None))
                for p in curve
            ]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts), label=model, lw=1.3)
        ax.set_xlabel("tokens seen (millions)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return True


def plot_bars(
    results: dict[str, dict],
    models: list[str],
    tasks: list[str],
    path: Path,
    metrics: dict[str, str] | None = None,
) -> bool:
    """Downstream scores, mean ± std over seeds, one group of bars per task (labelled with ``metrics[task]``);
    False when nothing ran."""
    data = {(m, t): mean_std(seed_scores(results, m, t)) for m in models for t in tasks}
    if not any(data.values()):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(tasks)), 4.5))
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        xs, ys, es = [], [], []
        for j, t in enumerate(tasks):
            if data[(m, t)] is not None:
                xs.append(j + i * width)
                ys.append(data[(m, t)][0])
                es.append(data[(m, t)][1])
        ax.bar(xs, ys, width, yerr=es, capsize=2, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tasks))])
    ax.set_xticklabels([f"{t}\n({(metrics or {}).get(t) or 'score'})" for t in tasks])
    ax.set_ylabel("dev score (mean ± std over seeds)")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------------------------ sections


def _provenance(matrix: Matrix, results: dict[str, dict], config_arg: str, folder: Path) -> list[str]:
    commits = sorted(
        {f"{r['commit']}{'+dirty' if r.get('dirty') else ''}" for r in results.values() if r.get("commit")}
    )
    cpus = sorted({r["cpu"] for r in results.values() if r.get("cpu")})
    torches = sorted({r["torch"] for r in results.values() if r.get("torch")})
    threads = sorted({str(r["threads"]) for r in results.values() if r.get("threads")})
    cpu_h = sum(r.get("cpu_s") or 0 for r in results.values()) / 3600
    # diagnostics: the config's `diagnostics`, models pre-trained with the tasks' text or continued from another,
    # and models `from` any of those
    extra = set(matrix.raw.get("diagnostics", []))
    extra |= {m["name"] for m in matrix.raw["model"] if m.get("task_text") or m.get("continue_from")}
    extra |= {m["name"] for m in matrix.raw["model"] if m.get("from") in extra}
    # a cell's model is its name's second part (pretrain/M, finetune/M/..., tasktext/M, prepare/M)
    extra_h = sum(
        r.get("cpu_s") or 0 for c, r in results.items() if c.partition("/")[2].split("/")[0] in extra
    )
    extra_h /= 3600
    split = (
        f" ({cpu_h - extra_h:.2f} without the diagnostic models: {extra_h:.2f} for "
        f"{', '.join(f'`{m}`' for m in sorted(extra))})"
        if extra_h
        else ""
    )
    for name in protocols(matrix):  # a protocol's cells, whichever model they fine-tune
        names = {t["name"] for t in _protocol_tasks(matrix, name)}
        hours = sum(r.get("cpu_s") or 0 for c, r in results.items()
                    if c.startswith("finetune/") and c.split("/")[2] in names) / 3600  # fmt: skip
        split += f'; {hours:.2f} of them for fine-tuning protocol "{name}"'
    return [
        f"Generated by `bertkit experiment report {config_arg}` from {len(results)} result files "
        f"(`{os.path.relpath(folder.resolve(), matrix.base.parent)}`) of the "
        f"{len(matrix.cells)} cells of `{matrix.name}`; {len(matrix.cells) - len(results)} cells not yet run.",
        "",
        f"- commands: `bertkit experiment {config_arg} --out runs/{matrix.name}` (resumable: re-run to continue), "
        f"then `bertkit experiment report {config_arg}`",
        f"- code commit(s) of the runs: {', '.join(commits) or '—'}; torch {', '.join(torches) or '—'}; "
        f"threads {', '.join(threads) or '—'}",
        f"- machine(s): {'; '.join(cpus) or '—'} (`lscpu` model name); the machine was shared, so wall times are "
        f"contended: compare CPU seconds",
        f"- CPU time of the finished cells: {cpu_h:.2f} CPU-hours{split}",
        f"- seeds: {_seeds_line(matrix)} (mean ± sample std over seeds; a single seed shows its score alone)",
        "",
    ]


def _seeds_line(matrix: Matrix) -> str:
    """The matrix's seeds, and each task's own where a task sets them (e.g. three for MRPC alone)."""
    top = seeds_of(matrix.raw)
    line = ", ".join(str(s) for s in top)
    own = [
        f"{t['name']} {', '.join(str(s) for s in seeds_of(matrix.raw, t))}"
        for t in matrix.raw.get("task", [])
        if seeds_of(matrix.raw, t) != top
    ]
    return line + (f" ({'; '.join(own)})" if own else "")


def majority_baselines(matrix: Matrix, tasks: list[str]) -> dict[str, float]:
    """Task -> its dev score (percent, as the tables) when every dev example gets the training split's most
    frequent label: what a model that learned nothing from the inputs scores. GLUE classification tasks whose
    files are present; a regression task (STS-B), a tagger or a reader has no one label to predict."""
    from collections import Counter

    from bertkit.experiment_cells import data_root
    from bertkit.tasks.glue import get_task, read_glue
    from bertkit.tasks.metrics import glue_metrics

    out: dict[str, float] = {}
    by_folder: dict[
        Path, float
    ] = {}  # variants of one task (SST-2, SST-2-1k) share its files: read them once
    for t in matrix.raw.get("task", []):
        if t.get("name") not in tasks or t.get("kind") != "glue":
            continue
        name = t.get("task", t["name"])
        task = get_task(name)
        folder = data_root(matrix) / t.get("dir", f"glue/{name}")
        if task.is_regression or not (folder / "dev.tsv").is_file():
            continue
        if folder not in by_folder:
            train, dev = read_glue(task, folder, "train"), read_glue(task, folder, "dev")
            top = Counter(e.label for e in train).most_common(1)[0][0]
            preds, gold = [top] * len(dev), [e.label for e in dev]
            by_folder[folder] = 100.0 * glue_metrics(name, preds, gold)[task.main_metric]
        out[t["name"]] = by_folder[folder]
    return out


def _table5(matrix: Matrix, results: dict[str, dict], size: str, tasks: list[str]) -> list[str]:
    n_seeds = len(seeds_of(matrix.raw))
    names = {m["name"] for m in matrix.raw["model"]}
    out = ["| model (BERT-" + size + ") | " + " | ".join(f"{t} ({metric_name(matrix, t)})" for t in tasks) + " |",
           "| --- |" + " --- |" * len(tasks)]  # fmt: skip
    for role, m in table5_models(matrix).items():
        if m not in names:
            continue
        cells = []
        for t in tasks:
            xs = seed_scores(results, m, t)
            cells.append(fmt(mean_std(xs), len(xs), n_seeds))
        out.append(f"| {ROW_LABELS[role]} (`{m}`) | " + " | ".join(cells) + " |")
    floor = majority_baselines(matrix, tasks)
    if floor:
        out.append("| no model: the training split's most frequent label | "
                   + " | ".join(f"{floor[t]:.1f}" if t in floor else "—" for t in tasks) + " |")  # fmt: skip
    return out + [""] + _paper_table5()


def _paper_table5() -> list[str]:
    """The paper's Table 5, for reference under ours."""
    out = ["The paper's Table 5 (BERT-Base, dev) for reference:", "",
           "| | " + " | ".join(PAPER_TABLE5["columns"]) + " |", "| --- |" + " --- |" * len(PAPER_TABLE5["columns"])]  # fmt: skip
    for k, v in PAPER_TABLE5["rows"].items():
        out.append(f"| {k} | " + " | ".join(f"{x:.1f}" for x in v) + " |")
    return out + [""]


def model_shape(matrix: Matrix, model: str):
    """The BertConfig ``model`` trains: the matrix's [pretrain] defaults, then the model's own preset and
    ``model = {...}`` overrides."""
    from bertkit.experiment import _shape

    spec = next(m for m in matrix.raw["model"] if m["name"] == model)
    return _shape({**matrix.raw.get("pretrain", {}), **spec})


def same_shape_random(matrix: Matrix, model: str) -> str | None:
    """The matrix's random-init model of the same architecture as ``model``, if it has one: the start a
    pre-trained model of that size has to beat."""
    names = {m["name"] for m in matrix.raw["model"]}
    if model not in names:
        return None
    target = model_shape(matrix, model)
    randoms = [m["name"] for m in matrix.raw["model"] if m.get("random")]
    return next((n for n in randoms if model_shape(matrix, n) == target), None)


def _table6(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    n_seeds = len(seeds_of(matrix.raw))
    sized = table6_models(matrix)
    randoms = {m: same_shape_random(matrix, m) for m in sized}
    with_random = any(randoms.values())
    extra_head = " random init, same shape: SST-2 / MRPC |" if with_random else ""
    out = [f"| L | H | A | tokens | held-out MLM perplexity | held-out MLM acc | SST-2 (acc) | MRPC (F1) |{extra_head}",
           "| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if with_random else "")]  # fmt: skip
    rows = []
    for m in sized:
        r = results.get(f"pretrain/{m}")
        shape = (r or {}).get("model_config") or {}
        key = (shape.get("num_hidden_layers") or 0, shape.get("hidden_size") or 0)
        scores = [
            fmt(mean_std(xs), len(xs), n_seeds)
            for xs in (seed_scores(results, m, "SST-2"), seed_scores(results, m, "MRPC"))
        ]
        if with_random:
            rnd = randoms[m]
            scores.append(
                " / ".join(fmt(mean_std(xs), len(xs), n_seeds)
                           for xs in (seed_scores(results, rnd, "SST-2"), seed_scores(results, rnd, "MRPC")))
                if rnd else "—"
            )  # fmt: skip
        if r is None:
            rows.append(((99, 99), f"| {m} | | | | {NOT_RUN} | | " + " | ".join(scores) + " |"))
            continue
        met = r["metrics"]
        rows.append((key, f"| {shape['num_hidden_layers']} | {shape['hidden_size']} | {shape['num_attention_heads']} | "
                          f"{r['tokens'] / 1e6:.1f}M | {met['mlm_perplexity']:.1f} | {100 * met['mlm_accuracy']:.1f} | "
                          + " | ".join(scores) + " |"))  # fmt: skip
    out += [line for _, line in sorted(rows)]
    sample = next((results[f"pretrain/{m}"]["metrics"] for m in sized if f"pretrain/{m}" in results), None)
    if sample and "masked_tokens" in sample:
        out += ["", f"Held-out sample: {sample['masked_tokens']} masked tokens in {sample['sequences']} sequences, "
                "the same masks for every model (a small sample: differences of a few percent in perplexity are "
                "within its noise)."]  # fmt: skip
    out += ["", "The paper's Table 6 (dev; 1M steps of 128k tokens) for reference:", "",
            "| L | H | A | LM ppl | MNLI-m | MRPC | SST-2 |", "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    out += [
        f"| {a} | {b} | {c} | {d:.2f} | {e:.1f} | {f:.1f} | {g:.1f} |" for a, b, c, d, e, f, g in PAPER_TABLE6
    ]
    return out + [""]


def feature_scores(results: dict[str, dict], entry: str, variant: str) -> list[float]:
    """Every seed's score of one Table 7 feature-based variant (``features/ENTRY/VARIANT/seedN`` cells; ENTRY is
    the [[features]] entry's name, by default its model's)."""
    return [
        r["primary"] for n, r in sorted(results.items()) if n.startswith(f"features/{entry}/{variant}/seed")
    ]


def _table7_finding(matrix: Matrix, results: dict[str, dict], ms, tasks: set[str] | None = None) -> list[str]:
    """Table 7's two claims: fine-tuning is at least as good as every feature-based variant, and among those
    the concatenation of the last four layers is the best (the paper: 96.1 against fine-tuning's 96.4). Only the
    [[features]] entries on ``tasks`` when given."""
    out = []
    for f in matrix.raw.get("features", []):
        m, task = f["model"], f["task"]
        if tasks is not None and task not in tasks:
            continue
        tuned = ms(m, task)
        scored = {
            v["name"]: mean_std(feature_scores(results, features_name(f), v["name"]))
            for v in f.get("variants", [])
        }
        scored = {k: v for k, v in scored.items() if v is not None}
        if tuned is None or not scored:
            out.append(f"- **Feature-based vs fine-tuning** (Table 7, {m} on {task}): {NOT_RUN}.")
            continue
        best = max(scored, key=lambda k: scored[k][0])
        gap = tuned[0] - scored[best][0]
        beyond = beyond_spread(tuned, scored[best])
        first = ("reproduces" if gap >= 0 else "does NOT reproduce") + (
            "" if beyond else ", inside the spread"
        )
        paper_best = max((k for k in scored if k in PAPER_TABLE7), key=PAPER_TABLE7.get, default=None)
        second = (
            f"the best variant is {best}"
            + ("" if paper_best is None else f", the paper's is {paper_best}")
            + (" (reproduces)" if best == paper_best else " (does NOT reproduce)" if paper_best else "")
        )
        out.append(f"- **Feature-based vs fine-tuning** (Table 7, {m} on {task}; the paper: fine-tuning ahead of "
                   f"every feature-based variant): fine-tuning {tuned[0]:.1f} vs best features {scored[best][0]:.1f} "
                   f"({gap:+.1f}: {first}); {second}.")  # fmt: skip
    return out


def _table7(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    n_seeds = len(seeds_of(matrix.raw))
    out = []
    for f in matrix.raw.get("features", []):
        m, task = f["model"], f["task"]
        out += [f"{task} dev entity F1, `{m}` (features: {f.get('max_train_examples', 'all')} training sentences, "
                f"a 2-layer BiLSTM of {f.get('hidden_size', 128)} units on the frozen features):", "",
                "| system | ours | paper (BERT-Base) |", "| --- | --- | --- |"]  # fmt: skip
        xs = seed_scores(results, m, task)
        out.append(f"| fine-tuning | {fmt(mean_std(xs), len(xs), n_seeds)} | {PAPER_TABLE7['fine-tuning']} |")
        for v in f.get("variants", []):
            ys = feature_scores(results, features_name(f), v["name"])
            out.append(f"| feature-based: {v['name']} | {fmt(mean_std(ys), len(ys), n_seeds)} | "
                       f"{PAPER_TABLE7.get(v['name'], '—')} |")  # fmt: skip
        out.append("")
    return out


def _compare(matrix: Matrix, results: dict[str, dict], tasks: list[str]) -> list[str]:
    n_seeds = len(seeds_of(matrix.raw))
    out = []
    for spec in matrix.raw["model"]:
        if spec.get("runner") != "transformers":
            continue
        ours, theirs = spec["same_cpu_as"], spec["name"]
        a, b = results.get(f"pretrain/{ours}"), results.get(f"pretrain/{theirs}")
        out += ["| | bertkit | transformers |", "| --- | --- | --- |"]
        if a is None or b is None:
            out += [f"| pre-training | {'done' if a else NOT_RUN} | {'done' if b else NOT_RUN} |", ""]
            continue
        out += [
            f"| runner | bertkit `{ours}` (commit {a.get('commit')}) | {b.get('runner', 'transformers')} |",
            f"| training CPU seconds (1 process, {a.get('threads')} thread) | {a['train_cpu_s']:.0f} | {b['train_cpu_s']:.0f} (budget {b['cpu_budget_s']:.0f}) |",
            f"| optimizer steps | {a['steps']} | {b['steps']} |",
            f"| tokens seen | {a['tokens'] / 1e6:.2f}M | {b['tokens'] / 1e6:.2f}M |",
            f"| held-out MLM loss | {a['metrics']['mlm_loss']:.3f} | {b['metrics']['mlm_loss']:.3f} |",
            f"| held-out MLM perplexity | {a['metrics']['mlm_perplexity']:.1f} | {b['metrics']['mlm_perplexity']:.1f} |",
            f"| held-out MLM accuracy | {100 * a['metrics']['mlm_accuracy']:.1f} | {100 * b['metrics']['mlm_accuracy']:.1f} |",
        ]  # fmt: skip
        by_name = {t["name"]: t for t in matrix.raw.get("task", [])}
        for t in tasks:
            if not {ours, theirs} <= set(task_models(matrix.raw, by_name[t])):
                continue  # a task the matrix does not run on both models (e.g. SQuAD on Table 5's rows only)
            xa, xb = seed_scores(results, ours, t), seed_scores(results, theirs, t)
            if xa or xb:
                out.append(f"| {t} ({metric_name(matrix, t)}), fine-tuned by bertkit | "
                           f"{fmt(mean_std(xa), len(xa), n_seeds)} | {fmt(mean_std(xb), len(xb), n_seeds)} |")  # fmt: skip
        out.append("")
    return out


def _positive_control(matrix: Matrix, results: dict[str, dict], tasks: list[str], ms) -> list[str]:
    """Published checkpoints (``package`` models) fine-tuned by the same cells as random init: whether the
    fine-tuning itself can show transfer, so that a pre-trained-vs-random gap that is missing above is read
    as a pre-training budget matter, not a fine-tuning one."""
    out = []
    for spec in matrix.raw["model"]:
        if not (spec.get("package") or spec.get("pretrained")):
            continue
        rows = table5_models(matrix)
        name, rnd, ours = spec["name"], rows["random"], rows["mlm+nsp"]
        parts = []
        for t in tasks:
            c, r, o = ms(name, t), ms(rnd, t), ms(ours, t)
            if c is None or r is None:
                continue
            beyond = beats(c, r)
            mine = f"; {ours} {o[0]:.1f}" if o is not None else ""
            parts.append(f"{t} {c[0]:.1f} vs random {r[0]:.1f} ({c[0] - r[0]:+.1f}, "
                         f"{'beyond' if beyond else 'inside'} the spread{mine})")  # fmt: skip
        out.append(f"- **Positive control** ({name}: a published pre-trained checkpoint fine-tuned by the same "
                   f"cells): " + ("; ".join(parts) if parts else NOT_RUN) + ".")  # fmt: skip
    return out


def _task_text_finding(matrix: Matrix, results: dict[str, dict], tasks: list[str], ms) -> list[str]:
    """Models pre-trained on their tasks' training text as well (``task_text``): against random init and
    against Table 5's MLM + NSP row, task by task (is the corpus why a task does not transfer?)."""
    out = []
    rows = table5_models(matrix)
    rnd, base = rows["random"], rows["mlm+nsp"]
    for spec in matrix.raw["model"]:
        if not spec.get("task_text"):
            continue
        name, parts = spec["name"], []
        # a continued model's control: continued from the same model as long, on the corpus alone
        controls = [m["name"] for m in matrix.raw["model"] if spec.get("continue_from")
                    and m.get("continue_from") == spec["continue_from"] and not m.get("task_text")]  # fmt: skip
        for t in tasks:
            x, r = ms(name, t), ms(rnd, t)
            if x is None or r is None:
                continue
            beyond = beats(x, r)
            versus = ""
            for other in [*controls, base]:
                o = ms(other, t)
                if o is not None:
                    inside = not beyond_spread(x, o)
                    versus += f", {x[0] - o[0]:+.1f} vs {other}{' (inside the spread)' if inside else ''}"
            parts.append(f"{t} {x[0] - r[0]:+.1f} vs random ({'reproduces' if beyond else 'does NOT reproduce'}"
                         f"{versus})")  # fmt: skip
        out.append(f"- **Pre-training with the tasks' training text** ({name}: {', '.join(spec['task_text'])}'s "
                   f"training text before the corpus): " + ("; ".join(parts) if parts else NOT_RUN) + ".")  # fmt: skip
    return out


def _same_shape_finding(matrix: Matrix, results: dict[str, dict], tasks: list[str], ms) -> list[str]:
    """Table 6's other sizes, and any pre-training continued from a Table 6 size on the corpus alone, against
    random init of their own shape, task by task (does a deeper or wider model, or more tokens, turn its lower
    held-out loss into transfer?). The Table 5 baseline has the first finding."""
    baseline = table5_models(matrix)["mlm+nsp"]
    sized = table6_models(matrix)
    continued = {m["name"]: m["continue_from"] for m in matrix.raw["model"]
                 if m.get("continue_from") in sized and not m.get("task_text")}  # fmt: skip
    parts = []
    for m in [*sized, *continued]:
        rnd = same_shape_random(matrix, m)
        if m == baseline or rnd is None:
            continue
        gaps = [
            f"{t} {a[0] - b[0]:+.1f} ({'reproduces' if beats(a, b) else 'does NOT reproduce'})"
            for t in tasks
            if (a := ms(m, t)) is not None and (b := ms(rnd, t)) is not None
        ]
        shape = model_shape(matrix, m)
        more = f", continued from {continued[m]}" if m in continued else ""
        parts.append(f"{m} ({shape.num_hidden_layers} x {shape.hidden_size}{more}) vs {rnd}: "
                     + (", ".join(gaps) if gaps else NOT_RUN))  # fmt: skip
    if not parts:
        return []
    return ["- **Pre-training beats random initialisation of the same shape** (Table 6's other sizes and their "
            "continued pre-trainings, layers x hidden): " + "; ".join(parts) + "."]  # fmt: skip


def _tally(wins: list[bool]) -> str:
    """ ", beyond the spread on k of n tasks" over the tasks both models have finished ("" when none has)."""
    return f", beyond the spread on {sum(wins)} of {len(wins)} tasks" if wins else ""


def _mlm_vs_ltr(rows: dict[str, str], ms, task: str, label: str = "") -> str:
    """Table 5's MLM rows against its left-to-right rows on ``task`` (the paper: MLM ahead on SQuAD)."""
    parts = []
    for m in (rows["mlm+nsp"], rows["mlm"]):
        for ltr in (rows["ltr"], rows["ltr+bilstm"]):
            a, b = ms(m, task), ms(ltr, task)
            if a is None or b is None:
                parts.append(f"{m} vs {ltr}: {NOT_RUN}")
            else:
                parts.append(
                    f"{m} vs {ltr}: {a[0] - b[0]:+.1f} ({'reproduces' if a[0] > b[0] else 'does NOT reproduce'})"
                )
    return f"- **MLM beats left-to-right on {task}**{label}: " + "; ".join(parts) + "."


def _nsp_effect(rows: dict[str, str], ms, tasks: list[str], label: str = "") -> str:
    parts = []
    for t in tasks:
        a, b = ms(rows["mlm+nsp"], t), ms(rows["mlm"], t)
        parts.append(f"{t}: {NOT_RUN}" if a is None or b is None else f"{t} {a[0] - b[0]:+.1f}")
    return (f"- **NSP effect**{label} (MLM + NSP minus MLM only; the paper: NSP helps QNLI, MNLI and SQuAD): "
            + "; ".join(parts) + ".")  # fmt: skip


def _same_budget_downstream(spec: dict, ms, tasks: list[str]) -> str:
    """bertkit's same-CPU model against transformers' (``spec``, a ``runner = "transformers"`` model) on
    ``tasks``: each gap, and whether bertkit's is at least as good everywhere (the issue's must-show)."""
    gaps = []  # (task, bertkit minus transformers, whether the gap exceeds the seeds' spread)
    for t in tasks:
        x, y = ms(spec["same_cpu_as"], t), ms(spec["name"], t)
        if x is not None and y is not None:
            gaps.append((t, x[0] - y[0], beyond_spread(x, y)))
    listed = ", ".join(f"{t} {d:+.1f}{'' if beyond else ' (inside the spread)'}" for t, d, beyond in gaps)
    worse = [t for t, d, _ in gaps if d < 0]
    if worse:
        return f"{listed}: below transformers on {', '.join(worse)} (NOT at least as good)"
    if gaps:
        return f"{listed}: at least as good on every task both have finished"
    return NOT_RUN


def findings(matrix: Matrix, results: dict[str, dict], tasks: list[str]) -> list[str]:
    """The issue's "must show" claims, each checked against the result files, on Table 5's tasks of the main
    protocol (``tasks``); Table 7's entries are those on a task without a protocol."""
    out = []

    def ms(m: str, t: str):
        return mean_std(seed_scores(results, m, t))

    # pre-trained beats random on every task by more than the seeds' spread
    rows = table5_models(matrix)
    base, rnd = rows["mlm+nsp"], rows["random"]
    verdicts, wins = [], []
    for t in tasks:
        a, b = ms(base, t), ms(rnd, t)
        if a is None or b is None:
            verdicts.append(f"{t}: {NOT_RUN}")
            continue
        margin = a[0] - b[0]
        wins.append(beats(a, b))
        verdicts.append(f"{t}: {margin:+.1f} ({'reproduces' if wins[-1] else 'does NOT reproduce'})")
    out.append(f"- **Pre-training beats random initialisation by more than the seeds' spread** ({base} vs {rnd}"
               f"{_tally(wins)}): " + "; ".join(verdicts) + ".")  # fmt: skip
    out += [_mlm_vs_ltr(rows, ms, t) for t in ("SQuAD-v1.1", "CoNLL-2003") if t in tasks]
    out.append(_nsp_effect(rows, ms, tasks))
    done = [
        results[f"pretrain/{m}"]
        for m in table6_models(matrix)
        if results.get(f"pretrain/{m}", {}).get("metrics")
    ]
    sized = sorted((r["model_config"]["num_hidden_layers"] * r["model_config"]["hidden_size"] ** 2, r["model"],
                    r["metrics"]["mlm_perplexity"]) for r in done)  # fmt: skip
    if len(sized) >= 2:
        mono = all(sized[i][2] > sized[i + 1][2] for i in range(len(sized) - 1))
        out.append("- **Size effect** (held-out MLM perplexity, smallest to largest, same tokens): "
                   + " > ".join(f"{m} {p:.1f}" for _, m, p in sized)
                   + (" — larger is better, as in the paper." if mono else " — not monotone: does NOT reproduce at this scale."))  # fmt: skip
    else:
        out.append(f"- **Size effect**: {NOT_RUN}.")
    out += _same_shape_finding(matrix, results, tasks, ms)
    out += _table7_finding(
        matrix, results, ms, {t["name"] for t in matrix.raw.get("task", []) if not t.get("protocol")}
    )
    out += _task_text_finding(matrix, results, tasks, ms)
    out += _positive_control(matrix, results, tasks, ms)
    for spec in matrix.raw["model"]:
        if spec.get("runner") != "transformers":
            continue
        a, b = results.get(f"pretrain/{spec['same_cpu_as']}"), results.get(f"pretrain/{spec['name']}")
        if a is None or b is None:
            out.append(f"- **bertkit vs transformers on the same CPU budget**: {NOT_RUN}.")
            continue
        lower = a["metrics"]["mlm_loss"] < b["metrics"]["mlm_loss"]
        out.append(f"- **bertkit vs transformers on the same CPU budget**: {a['tokens'] / max(1, b['tokens']):.2f}x the "
                   f"tokens; held-out MLM loss {a['metrics']['mlm_loss']:.3f} vs {b['metrics']['mlm_loss']:.3f} "
                   f"({'lower: reproduces' if lower else 'NOT lower'}); downstream: "
                   f"{_same_budget_downstream(spec, ms, tasks)}.")  # fmt: skip
    return out + [""]


def recipe_table(matrix: Matrix) -> list[str]:
    """The recipe probes (``experiments/recipe_probe.py`` result files named by ``recipe_results``)."""
    import json

    folder = matrix.raw.get("recipe_results")
    rows = []
    if folder and (matrix.base / folder).is_dir():
        rows = [json.loads(p.read_text()) for p in sorted((matrix.base / folder).glob("*.json"))]
    if not rows:
        return [f"Recipe probes: {NOT_RUN}.", ""]
    rows.sort(key=lambda r: (r["preset"], r["eval_loss"]))
    out = ["Short MLM-only probes from scratch on this corpus, one thread, each scored by `bertkit pretrain`'s "
           "held-out evaluation (20 batches of 64); lower held-out loss for the CPU seconds spent is better. "
           "Commands: `python experiments/recipe_probe.py --data DATA --preset P --lr LR --warmup W --batch-size B "
           "--seq S --steps N --results experiments/results/recipe` (each file holds its command, commit and CPU).",
           "", "| preset | lr | warm-up | batch x seq | steps | tokens | dropout | CPU s | held-out loss | held-out MLM acc |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in rows:
        out.append(f"| {r['preset']} | {r['lr']:g} | {r['warmup']:g} | {r['batch_size']} x {r['seq']} | {r['steps']} | "
                   f"{r['tokens'] / 1e6:.2f}M | {'0.1' if r.get('dropout', True) else 'off'} | {r['cpu_s']:.0f} | "
                   f"{r['eval_loss']:.3f} | {100 * r['eval_acc']:.1f} |")  # fmt: skip
    from bertkit.pretrain import RECIPES

    unprobed = [p for p in RECIPES["cpu"] if p not in {r["preset"] for r in rows}]
    out += ["", "Rows with another sequence length are scored on held-out sequences of that length (not comparable "
            "with the 128-token rows)." + (f" Not probed: {', '.join(unprobed)} (its rate in `bertkit.pretrain.RECIPES` "
            "is set by the rule that wider models want lower rates, not measured)." if unprobed else "")]  # fmt: skip
    commits = sorted({f"{r.get('commit')}{'+dirty' if r.get('dirty') else ''}" for r in rows})
    out += [
        "",
        f"Commit(s): {', '.join(commits)}; CPU: {'; '.join(sorted({r.get('cpu', '?') for r in rows}))}.",
        "",
    ]
    return out


def base_estimate() -> list[str]:
    """What BERT-Base as published costs: tokens, FLOPs (benchmarks.bench_gpu.training_flops), GPU-hours."""
    from bertkit.config import BertConfig

    try:
        from benchmarks.bench_gpu import PEAK_BF16_TFLOPS, training_flops
    except ImportError:  # outside the repository checkout
        return ["(needs the repository's `benchmarks/` package for `training_flops`)", ""]
    c = BertConfig.preset("base")
    phases = [(900_000, 128, 20), (100_000, 512, 80)]  # steps, sequence length, masked positions per sequence
    tokens = sum(s * 256 * n for s, n, _ in phases)
    flops = sum(s * training_flops(c, [n] * 256, 256 * k) for s, n, k in phases)
    peak = dict(PEAK_BF16_TFLOPS)["H100"] * 1e12
    mfu = 0.40
    hours = flops / (peak * mfu) / 3600
    return [
        f"- tokens: 900k steps x 256 x 128 + 100k steps x 256 x 512 = **{tokens / 1e9:.1f}B tokens** "
        "(the paper's 1M steps of 256 sequences, 90% at 128 tokens, 10% at 512)",
        f"- FLOPs (`training_flops` of `benchmarks/bench_gpu.py`: forward + backward, MLM head on the masked rows "
        f"only): **{flops:.2e}**",
        f"- one H100 (dense bf16 peak {peak / 1e12:.0f} TFLOP/s) at {mfu:.0%} MFU — the GPU bench's goal; the bench "
        f"has not been run on a GPU in this project yet, so this MFU is assumed, not measured: **{hours:,.0f} "
        f"GPU-hours** ({hours / 8 / 24:.1f} days on 8 GPUs)",
        "- the same pre-training under `torchrun` on 8 GPUs (global batch 256 = 8 x 32; `bertkit prepare` the "
        "corpus first):",
        "",
        "```",
        "cat > base.toml <<'EOF'",
        'preset = "base"',
        'objective = "mlm+nsp"',
        'recipe = "paper"      # lr 1e-4, warm-up 1% of the steps',
        "warmup = 10000",
        'precision = "bf16"',
        "[[phases]]",
        "steps = 900000",
        "max_seq_length = 128",
        "batch_size = 256",
        "[[phases]]",
        "steps = 100000",
        "max_seq_length = 512",
        "batch_size = 256",
        "max_predictions_per_seq = 80",
        "EOF",
        "torchrun --nproc_per_node 8 -m bertkit pretrain --config base.toml --data DATA_DIR --out runs/bert-base",
        "```",
        "",
    ]


# ------------------------------------------------------------------------------------------------ documents


def paper_report(matrix: Matrix, results: dict[str, dict], doc: Path, config_arg: str, folder: Path) -> str:
    size = matrix.raw.get("report_size", "mini")
    rows = set(table5_models(matrix).values())
    tasks = [t["name"] for t in matrix.raw.get("task", [])
             if rows & set(task_models(matrix.raw, t)) and not t.get("protocol")]  # fmt: skip
    lines = [f"# {matrix.raw.get('description', matrix.name)}", ""]
    lines += _provenance(matrix, results, config_arg, folder)
    prep = results.get("prepare", {}).get("metrics", {})
    pre = [r for n, r in results.items() if n.startswith("pretrain/") and r.get("tokens")]
    lines += ["## Set-up", "",
              f"- corpus: {', '.join(matrix.raw.get('corpus', []))} — {prep.get('documents', '?')} documents, "
              f"{prep.get('tokens', '?')} WordPiece tokens, vocabulary {results.get('vocab', {}).get('metrics', {}).get('vocab_size', matrix.raw.get('vocab_size'))}",
              f"- pre-training budget per model: {max((r['tokens'] for r in pre), default=0) / 1e6:.1f}M tokens "
              "(the same for every objective and size); held-out: the last documents of the corpus, the same "
              "masks for every model, scored by bertkit's masked-LM head",
              "- fine-tuning: dev sets; SQuAD v1.1 trains on the first articles of dev-v1.1 and evaluates on the "
              "last ones (the shared data has no SQuAD training file); "
              + _grid_text(matrix), ""]  # fmt: skip
    headline = matrix.raw.get("table5_protocol")
    found = findings(matrix, results, tasks)
    # each other protocol's verdict on the first finding (pre-trained vs random) goes right after it
    others = [name for name in protocols(matrix) if name != headline]
    found[1:1] = [line for name in others for line in _protocol_finding(matrix, results, name)]
    lines += ["## Findings", ""]
    if headline:  # Table 5's protocol first; the main one's findings follow under their own heading
        lines += [f'### Fine-tuning as the paper does: protocol "{headline}" (Table 5)', ""]
        lines += _protocol_finding(matrix, results, headline) + [""]
        lines += [f"### {SHORT_PROTOCOL}", ""]
    lines += found + _notes(matrix)
    lines += _pretrain_rows(matrix, results)
    short_title = f"## Table 5 — pre-training tasks (BERT-{size}, dev, mean ± std over seeds)"
    if headline:
        title = (f"## Table 5 — pre-training tasks (BERT-{size}, dev, mean ± std over seeds; fine-tuning protocol "
                 f'"{headline}", the rate the grid picked on dev)')  # fmt: skip
        lines += _protocol_table(matrix, results, headline, title) + _paper_table5()
        lines += _protocol_bars(matrix, results, doc, headline)
        short_title = f"## Table 5 under the {SHORT_PROTOCOL[0].lower()}{SHORT_PROTOCOL[1:]}"
    lines += [short_title, ""]
    lines += _table5(matrix, results, size, tasks)
    for name in others:
        lines += _protocol_table(matrix, results, name) + _protocol_bars(matrix, results, doc, name)
    lines += ["## Table 6 — model size (MLM + NSP, same tokens)", ""] + _table6(matrix, results)
    lines += ["## Table 7 — feature-based vs fine-tuning (CoNLL-2003)", ""] + _table7(matrix, results)
    lines += ["## Same CPU budget against transformers", "",
              "Both pre-train the MLM-only model (same corpus documents, vocabulary, shape, batch, learning rate, "
              "warm-up fraction, weight decay, clipping) for the same process CPU seconds of training at the same "
              "thread count (CPU seconds, not wall-clock: the machine was shared; on an idle machine with one "
              "thread the two are equal). transformers' side is its own pipeline (`experiments/transformers_mlm.py`: "
              "BertTokenizerFast, DataCollatorForLanguageModeling, BertForMaskedLM, Trainer); both models are "
              "scored on the same held-out masks and fine-tuned by the same bertkit code.", ""]  # fmt: skip
    lines += _compare(matrix, results, tasks)
    lines += _other_models(matrix, results)
    stem = doc.stem
    lines += ["## Figures", ""]
    if plot_curves(results, doc.parent / f"{stem}-curves.png"):
        lines += [f"![pre-training curves]({stem}-curves.png)", ""]
    else:
        lines += [f"Pre-training curves: {NOT_RUN}.", ""]
    models = [m["name"] for m in matrix.raw["model"] if not m.get("pretrained")]
    bars = list(table5_models(matrix).values()) + [m["name"] for m in matrix.raw["model"] if m.get("runner")]
    bars = [m for m in bars if m in models]
    if plot_bars(
        results, bars, tasks, doc.parent / f"{stem}-scores.png", {t: metric_name(matrix, t) for t in tasks}
    ):
        lines += [f"![downstream scores]({stem}-scores.png)", ""]
    lines += ["## Recipe: what learns the most per CPU-second", ""] + recipe_table(matrix)
    lines += ["## BERT-Base as published, on paper", ""] + base_estimate()
    return "\n".join(lines)


def _protocol_bars(matrix: Matrix, results: dict[str, dict], doc: Path, name: str) -> list[str]:
    """The bar chart of a protocol's models on its tasks, beside the report, and its Markdown line."""
    protocol_tasks = _protocol_tasks(matrix, name)
    names = [t["name"] for t in protocol_tasks]
    models = _protocol_models(matrix, protocol_tasks)
    figure = f"{doc.stem}-{name}-scores.png"
    if plot_bars(results, models, names, doc.parent / figure, {t: metric_name(matrix, t) for t in names}):
        return [f"![downstream scores, protocol {name}]({figure})", ""]
    return []


def _grid_text(matrix: Matrix) -> str:
    """Which tasks pick their learning rate from a grid, in words (from the config)."""
    gridded = [t["name"] for t in matrix.raw.get("task", [])
               if isinstance(t.get("lr"), list) and len(t["lr"]) > 1 and not t.get("freeze_encoder")]  # fmt: skip
    if not gridded:
        return "every task at one learning rate"
    return (f"the learning rate of {', '.join(gridded)} is picked on dev from a grid on the first seed, then used "
            "for every seed (the paper's practice)")  # fmt: skip


def protocols(matrix: Matrix) -> list[str]:
    """The fine-tuning protocols other than the matrix's main one (tasks with ``protocol = "..."``), in the
    config's order: each has its own table and finding, apart from Table 5's tasks."""
    return list(dict.fromkeys(t["protocol"] for t in matrix.raw.get("task", []) if t.get("protocol")))


def _protocol_tasks(matrix: Matrix, name: str) -> list[dict]:
    return [t for t in matrix.raw.get("task", []) if t.get("protocol") == name]


def _protocol_models(matrix: Matrix, tasks: list[dict]) -> list[str]:
    """Every model the protocol's tasks fine-tune, in the config's order."""
    return list(dict.fromkeys(m for t in tasks for m in task_models(matrix.raw, t)))


def _protocol_pairs(matrix: Matrix, tasks: list[dict]) -> list[tuple[str, str]]:
    """(pre-trained model, random init of its shape) for every pre-trained model the protocol's tasks
    fine-tune whose same-shape random init they fine-tune too."""
    models = _protocol_models(matrix, tasks)
    randoms = {m["name"] for m in matrix.raw["model"] if m.get("random")}
    pairs = []
    for m in models:
        rnd = same_shape_random(matrix, m) if m not in randoms else None
        if rnd in models:
            pairs.append((m, rnd))
    return pairs


def _settings_text(t: dict) -> str:
    """A task's fine-tuning settings in words, from the config (what the protocol's table header lists)."""
    n = t.get("max_train_examples")
    lrs = t.get("lr", 5e-5)
    lrs = lrs if isinstance(lrs, list) else [lrs]
    grid = f"lr grid {' / '.join(f'{float(x):g}' for x in lrs)}" if len(lrs) > 1 else f"lr {float(lrs[0]):g}"
    examples = f"{n} training examples (a random subset per seed)" if n else "the whole training set"
    if t.get("kind") == "squad":  # its training split is articles of the file, the last ones being dev
        first = f"the first {t['train_articles']}" if t.get("train_articles") else "all"
        examples = (f"{first} articles of {t.get('file', 'squad/dev-v1.1.json')} but the last "
                    f"{t.get('dev_articles', 8)} (its dev)" + (f", {n} questions" if n else ""))  # fmt: skip
    return f"{t['name']}: {examples}, {t.get('epochs', 3):g} epochs, batch {t.get('batch_size', 32)}, {grid}"


def _protocol_finding(matrix: Matrix, results: dict[str, dict], name: str) -> list[str]:
    """The first finding of the report (pre-trained beats random by more than the spread), judged on the
    protocol's tasks for every pre-trained model there with its same-shape random init; then Table 5's
    ablations and the same-budget pair where the protocol fine-tunes them, and Table 7 on its tasks."""
    tasks = _protocol_tasks(matrix, name)
    where = "Table 5 below" if matrix.raw.get("table5_protocol") == name else "its own table below"
    parts = []
    for m, rnd in _protocol_pairs(matrix, tasks):
        verdicts, wins = [], []
        for t in tasks:
            a = mean_std(seed_scores(results, m, t["name"]))
            b = mean_std(seed_scores(results, rnd, t["name"]))
            if a is None or b is None:
                verdicts.append(f"{t['name']} {NOT_RUN}")
            else:
                wins.append(beats(a, b))
                verdicts.append(f"{t['name']} {a[0] - b[0]:+.1f} "
                                f"({'reproduces' if wins[-1] else 'does NOT reproduce'})")  # fmt: skip
        shape = model_shape(matrix, m)
        parts.append(f"{m} ({shape.num_hidden_layers} x {shape.hidden_size}) vs {rnd}{_tally(wins)}: "
                     + ", ".join(verdicts))  # fmt: skip
    out = []
    if parts:
        out.append(f"- **Pre-training beats random initialisation by more than the seeds' spread, fine-tuning "
                   f"protocol \"{name}\"** ({where}): " + "; ".join(parts) + ".")  # fmt: skip
    # Table 5's ablations, where the protocol fine-tunes their rows: MLM vs LTR on the span and tagging tasks
    # (the paper's largest gaps), and the NSP effect on every task both MLM rows have
    rows = table5_models(matrix)
    label = f', protocol "{name}"'

    def ms(m: str, t: str):
        return mean_std(seed_scores(results, m, t))

    def runs(t: dict, roles: tuple[str, ...]) -> bool:
        return set(rows[r] for r in roles) <= set(task_models(matrix.raw, t))

    ltr_roles = ("mlm+nsp", "mlm", "ltr", "ltr+bilstm")
    out += [_mlm_vs_ltr(rows, ms, t["name"], label) for t in tasks
            if t.get("kind") in ("squad", "ner") and runs(t, ltr_roles)]  # fmt: skip
    nsp_tasks = [t["name"] for t in tasks if runs(t, ("mlm+nsp", "mlm"))]
    if nsp_tasks:
        out.append(_nsp_effect(rows, ms, nsp_tasks, label))
    for spec in matrix.raw["model"]:  # the same-CPU-budget pair, where the protocol fine-tunes both
        pair = {spec.get("same_cpu_as"), spec["name"]}
        both = [t["name"] for t in tasks if pair <= set(task_models(matrix.raw, t))]
        if spec.get("runner") == "transformers" and both:
            out.append(f"- **bertkit vs transformers on the same CPU budget**{label}, downstream: "
                       f"{_same_budget_downstream(spec, ms, both)}.")  # fmt: skip
    return out + _table7_finding(matrix, results, ms, {t["name"] for t in tasks})


def _chosen_lrs(results: dict[str, dict], model: str, task: str) -> set[float]:
    pre = f"finetune/{model}/{task}/seed"
    return {r["hyperparameters"]["lr"] for n, r in results.items()
            if n.startswith(pre) and "lr" in r.get("hyperparameters", {})}  # fmt: skip


def _protocol_table(matrix: Matrix, results: dict[str, dict], name: str, title: str = "") -> list[str]:
    """Every model of the protocol's tasks on each of them (mean ± std over seeds, and the rate the grid
    picked on dev), with the training split's majority label as the floor; under ``title`` if given."""
    tasks = _protocol_tasks(matrix, name)
    models = _protocol_models(matrix, tasks)
    roles = {m: role for role, m in table5_models(matrix).items()}
    out = [
        title
        or f'## Fine-tuning protocol "{name}" (dev, mean ± std over seeds; the rate the grid picked on dev)',
        "",
    ]
    out += [f"- {_settings_text(t)}" for t in tasks] + [""]
    out += ["| model | " + " | ".join(f"{t['name']} ({metric_name(matrix, t['name'], 'primary')})" for t in tasks) + " |",
            "| --- |" + " --- |" * len(tasks)]  # fmt: skip
    for m in models:
        cells = []
        for t in tasks:
            if m not in task_models(matrix.raw, t):
                cells.append("")
                continue
            xs = seed_scores(results, m, t["name"])
            lrs = _chosen_lrs(results, m, t["name"])
            picked = f" (lr {', '.join(f'{x:g}' for x in sorted(lrs))})" if lrs else ""
            cells.append(fmt(mean_std(xs), len(xs), len(seeds_of(matrix.raw, t))) + (picked if xs else ""))
        label = f"{ROW_LABELS[roles[m]]} (`{m}`)" if m in roles else m  # Table 5's rows by the paper's names
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    floor = majority_baselines(matrix, [t["name"] for t in tasks])
    if floor:
        out.append("| no model: the training split's most frequent label | "
                   + " | ".join(f"{floor[t['name']]:.1f}" if t["name"] in floor else "—" for t in tasks) + " |")  # fmt: skip
    return out + [""]


def _other_models(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    """Every fine-tuned model that is not a row of Table 5 or 6, the transformers comparison or a published
    checkpoint (e.g. a masking-rate variant, a probe), on each of its tasks."""
    shown = set(table5_models(matrix).values()) | set(table6_models(matrix))
    shown |= {
        m["name"] for m in matrix.raw["model"] if m.get("runner") or m.get("package") or m.get("pretrained")
    }
    tasks = [
        t for t in matrix.raw.get("task", []) if not t.get("protocol")
    ]  # protocols have their own tables
    models = [m["name"] for m in matrix.raw["model"] if m["name"] not in shown]
    models = [m for m in models if any(m in task_models(matrix.raw, t) for t in tasks)]
    if not models:
        return []
    cols = [t for t in tasks if any(m in task_models(matrix.raw, t) for m in models)]
    out = ["## Other models", "",
           "| model | " + " | ".join(f"{t['name']} ({metric_name(matrix, t['name'], 'primary')})" for t in cols) + " |",
           "| --- |" + " --- |" * len(cols)]  # fmt: skip
    for m in models:
        cells = []
        for t in cols:
            xs = seed_scores(results, m, t["name"])
            cells.append(
                fmt(mean_std(xs), len(xs), len(seeds_of(matrix.raw, t)))
                if m in task_models(matrix.raw, t)
                else ""
            )
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out + [""]


def _notes(matrix: Matrix) -> list[str]:
    """The config's ``notes = [...]``: lines of prose (pointers to related reports, caveats), no numbers of their
    own; the findings above them stay generated."""
    notes = matrix.raw.get("notes") or []
    return [f"- {n}" for n in notes] + ([""] if notes else [])


def _pretrain_rows(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    """One row per pre-trained model of the matrix: tokens, CPU seconds and the held-out masked-LM scores."""
    rows = []
    for m in matrix.raw["model"]:
        r = results.get(f"pretrain/{m['name']}")
        scores = _heldout_scores(r) if r else None
        if scores is None:
            continue
        loss, acc, gain = scores
        met, shape = r["metrics"], r.get("model_config") or {}
        tokens = f"{(r.get('tokens') or 0) / 1e6:.1f}M"
        if r.get("continued_from"):  # the tokens of the run it started from, then its own
            tokens = f"{r['tokens_before'] / 1e6:.1f}M ({r['continued_from']}) + {tokens}"
        rows.append(f"| {m['name']} | {shape.get('num_hidden_layers', '?')} / {shape.get('hidden_size', '?')} | "
                    f"{tokens} | {r.get('train_cpu_s', r.get('cpu_s', 0)):.0f} | "
                    f"{loss} | {acc} | {_num(_percent(met.get('unigram_accuracy')), 1)} | {_num(met.get('unigram_loss'))} | "
                    f"{gain} |")  # fmt: skip
    if not rows:
        return []
    return ["## Pre-training", "",
            "Held-out masked-LM scores (the same masks for every model; unigram: always the most frequent masked "
            "token, and the training data's token frequencies as the prediction (loss); word-order gain: the loss "
            "on the same sequences with their tokens shuffled minus the loss in order, in nats: 0 for a model that "
            "reads its context as a bag of words; — where the result file predates the measure).",
            "", "| model | layers / hidden | tokens | training CPU s | held-out MLM loss | MLM acc | unigram acc | "
            "unigram loss | word-order gain |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |", *rows, ""]  # fmt: skip


def _heldout_scores(r: dict) -> tuple[str, str, str] | None:
    """(loss, accuracy, word-order gain) of a pre-training result's held-out row: masked-LM scores, or a
    left-to-right model's next-token ones (result files before stop 23 kept those under ``train_eval`` and
    masked-LM scores a causal model cannot be given under ``metrics``); None when it has neither."""
    met = r.get("metrics") or {}
    if r.get("objective") == "ltr":
        ev = met if "next_token_loss" in met else {
            "next_token_loss": (r.get("train_eval") or {}).get("masked_lm_loss"),
            "next_token_accuracy": (r.get("train_eval") or {}).get("masked_lm_accuracy"),
        }  # fmt: skip
        acc = ev.get("next_token_accuracy")
        return (f"{_num(ev.get('next_token_loss'))} (next-token)",
                "—" if acc is None else f"{100 * acc:.1f} (next-token)", "—")  # fmt: skip
    if "mlm_accuracy" not in met:
        return None
    return f"{met['mlm_loss']:.3f}", f"{100 * met['mlm_accuracy']:.1f}", _num(met.get("word_order_gain"))


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _num(value: float | None, digits: int = 3) -> str:
    """A score to ``digits`` places, or — when the result file has none."""
    return "—" if value is None else f"{value:.{digits}f}"


def results_report(matrix: Matrix, results: dict[str, dict], doc: Path, config_arg: str, folder: Path) -> str:
    """One row per fine-tuning task of the matrix: mean ± std of the primary metric and the other metrics
    (after the pre-training scores, when the matrix pre-trains)."""
    lines = [f"# {matrix.raw.get('description', matrix.name)}", ""] + _provenance(
        matrix, results, config_arg, folder
    )
    pretraining = _pretrain_rows(matrix, results)
    lines += _notes(matrix) + pretraining + (["## Fine-tuning", ""] if pretraining else [])
    lines += [
        "| model | task | metric | result | other metrics (last seed) | settings |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in [x["name"] for x in matrix.raw["model"]]:
        for t in matrix.raw.get("task", []):
            if m not in task_models(matrix.raw, t):
                continue
            xs = seed_scores(results, m, t["name"])
            last = next((r for n, r in sorted(results.items(), reverse=True)
                         if n.startswith(f"finetune/{m}/{t['name']}/seed")), None)  # fmt: skip
            other = ", ".join(f"{k} {v:.2f}" for k, v in (last or {}).get("metrics", {}).items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool))  # fmt: skip
            extra = ", ".join(
                f"test {k} {v:.2f}"
                for k, v in (last or {}).get("test", {}).items()
                if k in ("f1", "accuracy")
            )
            settings = ", ".join(f"{k} {v}" for k, v in (last or {}).get("hyperparameters", {}).items())
            lines.append(f"| {m} | {t['name']} | {metric_name(matrix, t['name'], 'primary')} | "
                         f"{fmt(mean_std(xs), len(xs), len(seeds_of(matrix.raw, t)))} | {other}{'; ' + extra if extra else ''} | {settings} |")  # fmt: skip
    for f in matrix.raw.get("features", []):
        for v in f.get("variants", []):
            rs = [
                r
                for n, r in sorted(results.items())
                if n.startswith(f"features/{features_name(f)}/{v['name']}/seed")
            ]
            ms = mean_std([r["primary"] for r in rs])
            settings = ", ".join(
                f"{k} {x}" for k, x in (rs[-1].get("hyperparameters", {}) if rs else {}).items()
            )
            lines.append(f"| {f['model']} | {f['task']} feature-based ({v['name']}, BiLSTM on frozen layers) | F1 | "
                         f"{fmt(ms, len(rs), len(seeds_of(matrix.raw, f)))} | | {settings} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(
    config: str | os.PathLike, results: str | os.PathLike | None = None, doc: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Write the report of the matrix ``config`` from its result files; returns what was written."""
    matrix = load_matrix(config)
    folder = results_dir(matrix, str(results) if results else None)
    res = read_results(folder) if folder.is_dir() else {}
    target = doc or matrix.raw.get("report")
    if not target:
        raise UserError(f'{config}: no `report = "..."` path in the config; pass --doc FILE')
    path = Path(target) if doc else Path(matrix.base / target)
    kind = matrix.raw.get("report_kind", "paper")
    if kind not in ("paper", "results"):
        raise UserError(f"{config}: report_kind must be 'paper' or 'results', not {kind!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    config_arg = os.path.relpath(Path(config).resolve(), matrix.base.parent)
    text = (paper_report if kind == "paper" else results_report)(matrix, res, path, config_arg, folder)
    with atomic_write(path) as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return {"report": str(path), "results": len(res), "cells": len(matrix.cells),
            "figures": sorted(str(p) for p in (path.parent / f"{path.stem}-{kind}.png"
                                               for kind in ("curves", "scores", *(f"{n}-scores" for n in protocols(matrix))))
                              if p.exists())}  # fmt: skip
