"""The paper's Tables 5, 6 and 7 in its shape with our numbers (and the paper's for reference), the
same-budget comparison with transformers, the pre-training table and the models outside the tables."""

from __future__ import annotations

from lab.experiment import Matrix, features_name, seeds_of, task_models
from lab.report.scores import (
    NOT_RUN,
    ROW_LABELS,
    feature_scores,
    fmt,
    majority_baselines,
    mean_std,
    metric_name,
    same_shape_random,
    seed_scores,
    table5_models,
    table6_models,
)

# The paper's numbers (Devlin et al. 2019, dev sets), shown for reference beside ours.
PAPER_TABLE5 = {  # BERT-Base, dev; the paper's header gives each column's metric
    "columns": ["MNLI-m (acc)", "QNLI (acc)", "MRPC (acc)", "SST-2 (acc)", "SQuAD (F1)"],
    "rows": {
        "BERT-Base (MLM + NSP)": [84.4, 88.4, 86.7, 92.7, 88.5],
        "No NSP": [83.9, 84.9, 86.5, 92.6, 87.9],
        "LTR & No NSP": [82.1, 84.3, 77.5, 92.1, 77.8],
        "+ BiLSTM": [82.1, 84.1, 75.7, 91.6, 84.9],
    },
}

PAPER_TABLE6 = [  # L, H, A, held-out MLM perplexity, then dev accuracy: MNLI-m, MRPC, SST-2
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


def table5(matrix: Matrix, results: dict[str, dict], size: str, tasks: list[str]) -> list[str]:
    """Table 5 of the main protocol: the paper's rows (``table5`` roles) on ``tasks``, the majority-label floor, and the
    paper's Table 5 for reference."""
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
    return out + [""] + paper_table5()


def paper_table5() -> list[str]:
    """The paper's Table 5, for reference under ours."""
    out = ["The paper's Table 5 (BERT-Base, dev) for reference:", "",
           "| | " + " | ".join(PAPER_TABLE5["columns"]) + " |", "| --- |" + " --- |" * len(PAPER_TABLE5["columns"])]  # fmt: skip
    for k, v in PAPER_TABLE5["rows"].items():
        out.append(f"| {k} | " + " | ".join(f"{x:.1f}" for x in v) + " |")
    return out + [""]


def table6(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    """Table 6: each size's shape, tokens, held-out MLM perplexity and accuracy, SST-2 and MRPC, beside the paper's."""
    n_seeds = len(seeds_of(matrix.raw))
    sized = table6_models(matrix)
    randoms = {m: same_shape_random(matrix, m) for m in sized}
    with_random = any(randoms.values())
    extra_head = " random init, same shape: SST-2 / MRPC |" if with_random else ""
    heads = " | ".join(f"{t} ({metric_name(matrix, t)})" for t in ("SST-2", "MRPC"))
    out = [f"| L | H | A | tokens | held-out MLM perplexity | held-out MLM acc | {heads} |{extra_head}",
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
    out += ["", "The paper's Table 6 (dev accuracy; 1M steps of 128k tokens) for reference:", "",
            "| L | H | A | LM ppl | MNLI-m (acc) | MRPC (acc) | SST-2 (acc) |", "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    out += [
        f"| {a} | {b} | {c} | {d:.2f} | {e:.1f} | {f:.1f} | {g:.1f} |" for a, b, c, d, e, f, g in PAPER_TABLE6
    ]
    return out + [""]


def paper_row(matrix: Matrix, variant: str) -> str:
    """The row of the paper's Table 7 a feature-based variant stands for: the config's ``table7_paper_rows``
    maps names whose layers differ in a shallower model (BERT-tiny's "concat-all-three" is the paper's
    "concat-last-four": all the hidden states it has); else the variant's own name."""
    return str(matrix.raw.get("table7_paper_rows", {}).get(variant, variant))


def table7(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    """Table 7 per [[features]] entry: fine-tuning and each feature-based variant on its task, beside the paper's."""
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
            row = paper_row(matrix, v["name"])
            label = v["name"] if row == v["name"] else f"{v['name']} (the paper's {row})"
            out.append(f"| feature-based: {label} | {fmt(mean_std(ys), len(ys), n_seeds)} | "
                       f"{PAPER_TABLE7.get(row, '—')} |")  # fmt: skip
        out.append("")
    return out


def compare(matrix: Matrix, results: dict[str, dict], tasks: list[str]) -> list[str]:
    """The same-CPU-budget pair (bertkit vs transformers' pipeline): tokens, held-out MLM loss, downstream scores."""
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


def other_models(matrix: Matrix, results: dict[str, dict]) -> list[str]:
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


def pretrain_rows(matrix: Matrix, results: dict[str, dict]) -> list[str]:
    """One row per pre-trained model of the matrix: tokens, CPU seconds and the held-out masked-LM scores; a
    replaced-token column beside them when an ELECTRA model is among the rows."""
    rows, electra = [], False
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
        electra = electra or r.get("objective") == "electra"
        rows.append((f"| {m['name']} | {shape.get('num_hidden_layers', '?')} / {shape.get('hidden_size', '?')} | "
                     f"{tokens} | {r.get('train_cpu_s', r.get('cpu_s', 0)):.0f} | "
                     f"{loss} | {acc} | {_num(_percent(met.get('unigram_accuracy')), 1)} | {_num(met.get('unigram_loss'))} | "
                     f"{gain} |", _replaced_token_cell(r)))  # fmt: skip
    if not rows:
        return []
    head = ("| model | layers / hidden | tokens | training CPU s | held-out MLM loss | MLM acc | unigram acc | "
            "unigram loss | word-order gain |")  # fmt: skip
    rule = "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    text = ("Held-out masked-LM scores (the same masks for every model; unigram: always the most frequent masked "
            "token, and the training data's token frequencies as the prediction (loss); word-order gain: the loss "
            "on the same sequences with their tokens shuffled minus the loss in order, in nats: 0 for a model that "
            "reads its context as a bag of words; — where the result file predates the measure).")  # fmt: skip
    if electra:  # the column only where it says something: the other matrices' pages stay as they were
        head, rule = head + " replaced-token acc (prior) |", rule + " --- |"
        text += (" ELECTRA's masked-LM scores are its generator's, on the same masks (result files that predate "
                 "this: the run's own held-out evaluation, with no word-order gain); its "
                 "encoder is the discriminator, scored by replaced-token accuracy on the held-out documents beside "
                 "the prior: the accuracy of calling every token original (1 − the share replaced), which a "
                 "discriminator that learned nothing reaches.")  # fmt: skip
    lines = [row + (f" {cell} |" if electra else "") for row, cell in rows]
    return ["## Pre-training", "", text, "", head, rule, *lines, ""]


def _replaced_token_cell(r: dict) -> str:
    """An ELECTRA result's held-out replaced-token accuracy and its prior, in percent; — for other models."""
    met = r.get("metrics") or {}
    acc, share = met.get("replaced_token_accuracy"), met.get("replaced_share")
    if r.get("objective") != "electra" or acc is None:
        return "—"
    return f"{100 * acc:.1f}" + ("" if share is None else f" ({100 * (1 - share):.1f})")


def _heldout_scores(r: dict) -> tuple[str, str, str] | None:
    """(loss, accuracy, word-order gain) of a pre-training result's held-out row: masked-LM scores, or a
    left-to-right model's next-token ones (older result files kept those under ``train_eval`` and
    masked-LM scores a causal model cannot be given under ``metrics``), or ELECTRA's generator's (from the
    run's own held-out evaluation: no word-order gain); None when it has none."""
    met = r.get("metrics") or {}
    if r.get("objective") == "ltr":
        ev = met if "next_token_loss" in met else {
            "next_token_loss": (r.get("train_eval") or {}).get("masked_lm_loss"),
            "next_token_accuracy": (r.get("train_eval") or {}).get("masked_lm_accuracy"),
        }  # fmt: skip
        acc = ev.get("next_token_accuracy")
        return (f"{_num(ev.get('next_token_loss'))} (next-token)",
                "—" if acc is None else f"{100 * acc:.1f} (next-token)", "—")  # fmt: skip
    if r.get("objective") == "electra" and ("mlm_accuracy" in met or "masked_lm_accuracy" in met):
        loss, acc = (("mlm_loss", "mlm_accuracy") if "mlm_accuracy" in met  # scored as every other model
                     else ("masked_lm_loss", "masked_lm_accuracy"))  # older files: the run's own evaluation  # fmt: skip
        return (f"{_num(met.get(loss))} (generator)", f"{100 * met[acc]:.1f} (generator)",
                _num(met.get("word_order_gain")))  # fmt: skip
    if "mlm_accuracy" not in met:
        return None
    return f"{met['mlm_loss']:.3f}", f"{100 * met['mlm_accuracy']:.1f}", _num(met.get("word_order_gain"))


def _percent(value: float | None) -> float | None:
    """A fraction as a percentage (None stays None)."""
    return None if value is None else 100 * value


def _num(value: float | None, digits: int = 3) -> str:
    """A score to ``digits`` places, or — when the result file has none."""
    return "—" if value is None else f"{value:.{digits}f}"
