"""Fine-tuning protocols beside the main one (tasks with ``protocol = "..."``): each protocol's table, bar
chart and verdicts; ``table5_protocol`` makes one of them Table 5."""

from __future__ import annotations

from pathlib import Path

from lab.experiment import Matrix, seeds_of, task_models
from lab.experiment.grid import pick
from lab.report.findings import (
    mlm_vs_ltr,
    mlm_vs_ltr_by_budget,
    nsp_effect,
    pooling_effect,
    same_budget_downstream,
    table7_finding,
)
from lab.report.plots import plot_bars
from lab.report.scores import (
    NOT_RUN,
    ROW_LABELS,
    beats,
    fmt,
    is_random,
    majority_baselines,
    mean_std,
    metric_name,
    model_shape,
    protocol_tasks,
    same_shape_random,
    seed_scores,
    table5_models,
    tally,
)

# The main protocol's heading where another protocol is Table 5's (``table5_protocol``)
SHORT_PROTOCOL = "Short fine-tuning (the main protocol: a slice of each training set for a few hundred steps)"


def protocol_bars(matrix: Matrix, results: dict[str, dict], doc: Path, name: str) -> list[str]:
    """The bar chart of a protocol's models on its tasks, beside the report, and its Markdown line."""
    tasks = protocol_tasks(matrix, name)
    names = [t["name"] for t in tasks]
    models = _protocol_models(matrix, tasks)
    figure = f"{doc.stem}-{name}-scores.png"
    if plot_bars(results, models, names, doc.parent / figure, {t: metric_name(matrix, t) for t in names}):
        return [f"![downstream scores, protocol {name}]({figure})", ""]
    return []


def _protocol_models(matrix: Matrix, tasks: list[dict]) -> list[str]:
    """Every model the protocol's tasks fine-tune, in the config's order."""
    return list(dict.fromkeys(m for t in tasks for m in task_models(matrix.raw, t)))


def _protocol_pairs(matrix: Matrix, tasks: list[dict]) -> list[tuple[str, str]]:
    """(pre-trained model, random init of its shape) for every pre-trained model the protocol's tasks
    fine-tune whose same-shape random init they fine-tune too."""
    models = _protocol_models(matrix, tasks)
    randoms = {m["name"] for m in matrix.raw["model"] if is_random(matrix, m["name"])}
    pairs = []
    for m in models:
        rnd = same_shape_random(matrix, m, among=models) if m not in randoms else None
        if rnd is not None:
            pairs.append((m, rnd))
    return pairs


def _settings_text(t: dict) -> str:
    """A task's fine-tuning settings in words, from the config (what the protocol's table header lists)."""
    n = t.get("max_train_examples")
    lrs = t.get("lr", 5e-5)
    lrs = lrs if isinstance(lrs, list) else [lrs]
    grid = f"lr grid {' / '.join(f'{float(x):g}' for x in lrs)}" if len(lrs) > 1 else f"lr {float(lrs[0]):g}"
    if t.get("lr_extend"):
        grid += (f", extended one rate at a time to {' / '.join(f'{float(x):g}' for x in sorted(t['lr_extend']))} "
                 "while the pick on dev lies on the edge")  # fmt: skip
    examples = f"{n} training examples (a random subset per seed)" if n else "the whole training set"
    if t.get("kind") == "squad":  # its training split is articles of the file, the last ones being dev
        first = f"the first {t['train_articles']}" if t.get("train_articles") else "all"
        examples = (f"{first} articles of {t.get('file', 'squad/dev-v1.1.json')} but the last "
                    f"{t.get('dev_articles', 8)} (its dev)" + (f", {n} questions" if n else ""))  # fmt: skip
    return f"{t['name']}: {examples}, {t.get('epochs', 3):g} epochs, batch {t.get('batch_size', 32)}, {grid}"


def protocol_finding(matrix: Matrix, results: dict[str, dict], name: str) -> list[str]:
    """The findings of protocol ``name``, in the report's order: pre-trained beats random (each pre-trained
    model against its same-shape random init), [CLS] or mean pooling, Table 5's ablations (MLM vs LTR, NSP),
    the rate grids' edges, the same-budget pair with transformers, and Table 7 on its tasks."""
    tasks = protocol_tasks(matrix, name)
    label = f', protocol "{name}"'

    def ms(m: str, t: str):
        return mean_std(seed_scores(results, m, t))

    pooled = pooling_effect(matrix, ms, _protocol_pairs(matrix, tasks), [t["name"] for t in tasks], label)
    grids = grid_edges_finding(matrix, results, tasks, label)
    return [
        *_beats_random(matrix, results, name, tasks),
        *([pooled] if pooled else []),
        *_table5_ablations(matrix, results, tasks, label, ms),
        *([grids] if grids else []),
        *_same_budget_lines(matrix, tasks, label, ms),
        *table7_finding(matrix, results, ms, {t["name"] for t in tasks}),
    ]


def _beats_random(matrix: Matrix, results: dict[str, dict], name: str, tasks: list[dict]) -> list[str]:
    """The first finding: each pre-trained model of the protocol against the random init of its shape, one
    line per pair (the models differ in what they show), with a verdict per task both fine-tune."""
    parts = []
    for m, rnd in _protocol_pairs(matrix, tasks):
        verdicts, wins = [], []
        for t in tasks:
            if not {m, rnd} <= set(task_models(matrix.raw, t)):
                continue  # a task that fine-tunes only one of the two: no verdict to wait for
            a = mean_std(seed_scores(results, m, t["name"]))
            b = mean_std(seed_scores(results, rnd, t["name"]))
            if a is None or b is None:
                verdicts.append(f"{t['name']} {NOT_RUN}")
            else:
                wins.append(beats(a, b))
                verdicts.append(f"{t['name']} {a[0] - b[0]:+.1f} "
                                f"({'reproduces' if wins[-1] else 'does NOT reproduce'})")  # fmt: skip
        shape = model_shape(matrix, m)
        parts.append(f"{m} ({shape.num_hidden_layers} x {shape.hidden_size}) vs {rnd}{tally(wins)}: "
                     + ", ".join(verdicts))  # fmt: skip
    if not parts:
        return []
    where = "Table 5 below" if matrix.raw.get("table5_protocol") == name else "its own table below"
    return [f"- **Pre-training beats random initialisation by more than the seeds' spread, fine-tuning "
            f"protocol \"{name}\"** ({where}), each pre-trained model against the random init of its shape:",
            *(f"  - {part}." for part in parts)]  # fmt: skip


def _table5_ablations(
    matrix: Matrix, results: dict[str, dict], tasks: list[dict], label: str, ms
) -> list[str]:
    """Table 5's ablations where the protocol fine-tunes their rows: MLM vs LTR on the span and tagging tasks
    (the paper's largest gaps), at the rows' shape, at ``table5_wide``'s and over two budgets; then the NSP
    effect on every task both MLM rows have."""
    rows = table5_models(matrix)

    def runs(t: dict, models) -> bool:
        return set(models) <= set(task_models(matrix.raw, t))

    span_tasks = [t for t in tasks if t.get("kind") in ("squad", "ner")]
    ltr_roles = ("mlm+nsp", "mlm", "ltr", "ltr+bilstm")
    out = [
        mlm_vs_ltr(rows, ms, t["name"], label) for t in span_tasks if runs(t, (rows[r] for r in ltr_roles))
    ]
    wide = matrix.raw.get("table5_wide") or {}
    if wide:
        shape = model_shape(matrix, next(iter(wide.values())))
        at = f"{label}, at {shape.num_hidden_layers} x {shape.hidden_size}"
        out += [mlm_vs_ltr(wide, ms, t["name"], at) for t in span_tasks if runs(t, wide.values())]
    longer = [mlm_vs_ltr_by_budget(matrix, results, ms, t["name"], label) for t in span_tasks]
    out += [line for line in longer if line]
    nsp_tasks = [t["name"] for t in tasks if runs(t, (rows["mlm+nsp"], rows["mlm"]))]
    return out + ([nsp_effect(rows, ms, nsp_tasks, label)] if nsp_tasks else [])


def _same_budget_lines(matrix: Matrix, tasks: list[dict], label: str, ms) -> list[str]:
    """bertkit vs transformers pre-trained on the same CPU budget, where the protocol fine-tunes both."""
    out = []
    for spec in matrix.raw["model"]:
        pair = {spec.get("same_cpu_as"), spec["name"]}
        both = [t["name"] for t in tasks if pair <= set(task_models(matrix.raw, t))]
        if spec.get("runner") == "transformers" and both:
            out.append(f"- **bertkit vs transformers on the same CPU budget**{label}, downstream: "
                       f"{same_budget_downstream(spec, ms, both)}.")  # fmt: skip
    return out


def grid_edges_finding(matrix: Matrix, results: dict[str, dict], tasks: list[dict], label: str) -> str | None:
    """How the rate grids of ``tasks`` with ``lr_extend`` came out on the first seed: how many picks lay inside
    the base grid or on its edge, and where the next rate out moved the pick (see lab/experiment/grid.py).
    None when no task extends its grid."""
    inside, held, moved, beyond_none, open_ = 0, 0, [], 0, 0
    for t in tasks:
        if not t.get("lr_extend"):
            continue
        for m in task_models(matrix.raw, t):
            cell = matrix.cell(f"finetune/{m}/{t['name']}/seed{seeds_of(matrix.raw, t)[0]}")
            base = cell.spec.get("grid") or []
            if not base or not all(n in results for n in base):
                open_ += 1
                continue
            first, scores = pick(base, results)
            if min(scores) < first < max(scores):
                inside += 1
                continue
            side = "above" if first == max(scores) else "below"
            out = [n for n in cell.after if matrix.cell(n).spec["extends"] == side]
            if not out:
                beyond_none += 1
            elif not all(n in results for n in out):
                open_ += 1
            elif (final := pick(base + out, results)[0]) != first:
                # the last rate out won too: the optimum may lie further still
                last = (
                    all(not results[n].get("skipped") for n in out)
                    and final == results[out[-1]]["hyperparameters"]["lr"]
                )
                moved.append(
                    f"{m} on {t['name']} {first:g} -> {final:g}{' (the last rate tried)' if last else ''}"
                )
            else:
                held += 1
    total = inside + held + len(moved) + beyond_none + open_
    if not total:
        return None
    text = (f"- **Rate grids**{label} (first seed; a pick on the grid's edge tries the next rate out, "
            f"`lr_extend`): of {total} grids, {inside} picked a rate inside the grid and "
            f"{held + len(moved) + beyond_none} one on its edge; the next rate out moved the pick on {len(moved)}"
            f"{': ' + ', '.join(moved) if moved else ''}; on {held} the edge rate stayed best")  # fmt: skip
    if beyond_none:
        text += f"; {beyond_none} lie on an edge with no rate beyond it"
    return text + (f"; {open_} not yet decided." if open_ else ".")


def _chosen_lrs(results: dict[str, dict], model: str, task: str) -> set[float]:
    """The learning rates the seed cells of ``model`` on ``task`` ran at (the grid's pick on dev)."""
    pre = f"finetune/{model}/{task}/seed"
    return {r["hyperparameters"]["lr"] for n, r in results.items()
            if n.startswith(pre) and "lr" in r.get("hyperparameters", {})}  # fmt: skip


def protocol_table(matrix: Matrix, results: dict[str, dict], name: str, title: str = "") -> list[str]:
    """Every model of the protocol's tasks on each of them (mean ± std over seeds, and the rate the grid
    picked on dev), with the training split's majority label as the floor; under ``title`` if given."""
    tasks = protocol_tasks(matrix, name)
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
