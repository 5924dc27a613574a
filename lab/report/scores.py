"""Scores of a matrix's result files: each seed's score, mean ± std, and the comparisons every verdict uses."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

from lab.experiment import Matrix, table5_rows

NOT_RUN = "not yet run"

ROW_LABELS = {"mlm+nsp": "MLM + NSP (BERT)", "mlm": "MLM only (No NSP)", "ltr": "LTR & No NSP",
              "ltr+bilstm": "LTR & No NSP + BiLSTM", "random": "random init (no pre-training)",
              "transformers-mlm": "transformers' pipeline, MLM only"}  # fmt: skip

METRIC_NAMES = {"SST-2": "acc", "CoLA": "MCC", "MRPC": "F1", "STS-B": "Spearman", "CoNLL-2003": "F1",
                "SQuAD-v1.1": "F1", "SQuAD-v2.0": "F1"}  # fmt: skip

KIND_METRICS = {
    "ner": "F1",
    "squad": "F1",
}  # a task named otherwise (a variant of CoNLL or SQuAD): its kind's metric


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


def seed_scores(results: dict[str, dict], model: str, task: str) -> list[float]:
    """The primary score of every finished seed cell ``finetune/<model>/<task>/seed<k>``."""
    pre = f"finetune/{model}/{task}/seed"
    return [
        r["primary"] for n, r in sorted(results.items()) if n.startswith(pre) and r.get("primary") is not None
    ]


def mean_std(xs: list[float]) -> tuple[float, float] | None:
    """Mean and sample standard deviation of ``xs`` (std 0 for one score), or None for none."""
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
    """Role -> model name of Table 5's rows (and of every finding that compares them): ``table5_rows``."""
    return table5_rows(matrix.raw)


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


def majority_baselines(matrix: Matrix, tasks: list[str]) -> dict[str, float]:
    """Task -> its dev score (percent, as the tables) when every dev example gets the training split's most
    frequent label: what a model that learned nothing from the inputs scores. GLUE classification tasks whose
    files are present; a regression task (STS-B), a tagger or a reader has no one label to predict."""
    from collections import Counter

    from bertkit.tasks.glue import get_task, read_glue
    from bertkit.tasks.metrics import glue_metrics
    from lab.experiment.paths import data_root

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


def model_shape(matrix: Matrix, model: str):
    """The BertConfig whose weights ``model`` fine-tunes: :func:`lab.experiment.matrix.shape_of`."""
    from lab.experiment.matrix import shape_of

    return shape_of(matrix.raw, model)


def is_random(matrix: Matrix, model: str) -> bool:
    """Whether the weights ``model`` fine-tunes are a random initialisation (a ``random`` model, or one whose
    ``from`` is)."""
    from lab.experiment.matrix import weights_of

    specs = {m["name"]: m for m in matrix.raw["model"]}
    return model in specs and bool(specs[weights_of(matrix.raw, model)].get("random"))


def same_shape_random(matrix: Matrix, model: str, among: Iterable[str] | None = None) -> str | None:
    """The matrix's random-init model of the same architecture as ``model``, if it has one: the start a
    pre-trained model of that size has to beat. A random model with the same fine-tuning head as ``model``
    (``head = {...}``, e.g. mean pooling) comes first, then the plain one of that shape; ``among`` limits the
    choice to those models (e.g. the ones a protocol fine-tunes)."""
    specs = {m["name"]: m for m in matrix.raw["model"]}
    if model not in specs:
        return None
    target, head = model_shape(matrix, model), specs[model].get("head")
    randoms = [n for n in specs if is_random(matrix, n) and n != model]
    if among is not None:
        randoms = [n for n in randoms if n in set(among)]
    shaped = [n for n in randoms if model_shape(matrix, n) == target]
    same_head = [n for n in shaped if specs[n].get("head") == head]
    plain = [n for n in shaped if not specs[n].get("head")]
    return next(iter(same_head + plain), None)


def feature_scores(results: dict[str, dict], entry: str, variant: str) -> list[float]:
    """Every seed's score of one Table 7 feature-based variant (``features/ENTRY/VARIANT/seedN`` cells; ENTRY is
    the [[features]] entry's name, by default its model's)."""
    return [
        r["primary"] for n, r in sorted(results.items()) if n.startswith(f"features/{entry}/{variant}/seed")
    ]


def tally(wins: list[bool]) -> str:
    """ ", beyond the spread on k of n tasks" over the tasks both models have finished ("" when none has)."""
    return f", beyond the spread on {sum(wins)} of {len(wins)} tasks" if wins else ""


def protocols(matrix: Matrix) -> list[str]:
    """The fine-tuning protocols other than the matrix's main one (tasks with ``protocol = "..."``), in the
    config's order: each has its own table and finding, apart from Table 5's tasks."""
    return list(dict.fromkeys(t["protocol"] for t in matrix.raw.get("task", []) if t.get("protocol")))


def protocol_tasks(matrix: Matrix, name: str) -> list[dict]:
    """The [[task]] entries of protocol ``name``, in the config's order."""
    return [t for t in matrix.raw.get("task", []) if t.get("protocol") == name]
