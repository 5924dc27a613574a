"""The issue's "must show" claims, each checked against the result files: pre-trained vs random, MLM vs
left-to-right, NSP, size, Table 7, task text, the positive control and bertkit vs transformers."""

from __future__ import annotations

from lab.experiment import Matrix, features_name
from lab.experiment.matrix import weights_of
from lab.report.scores import (
    NOT_RUN,
    beats,
    beyond_spread,
    feature_scores,
    mean_std,
    model_shape,
    same_shape_random,
    seed_scores,
    table5_models,
    table6_models,
    tally,
)
from lab.report.tables import PAPER_TABLE7, paper_row


def table7_finding(matrix: Matrix, results: dict[str, dict], ms, tasks: set[str] | None = None) -> list[str]:
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
        rows = {k: paper_row(matrix, k) for k in scored}  # our variant -> the paper's row it stands for
        paper_best = max((k for k in scored if rows[k] in PAPER_TABLE7), key=lambda k: PAPER_TABLE7[rows[k]],
                         default=None)  # fmt: skip
        second = (
            f"the best variant is {best}"
            + (
                ""
                if paper_best is None
                else f", the paper's is {rows[paper_best]}"
                + ("" if rows[paper_best] == paper_best else f" ({paper_best} here)")
            )  # fmt: skip
            + (" (reproduces)" if best == paper_best else " (does NOT reproduce)" if paper_best else "")
        )
        out.append(f"- **Feature-based vs fine-tuning** (Table 7, {m} on {task}; the paper: fine-tuning ahead of "
                   f"every feature-based variant): fine-tuning {tuned[0]:.1f} vs best features {scored[best][0]:.1f} "
                   f"({gap:+.1f}: {first}); {second}.")  # fmt: skip
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


def mlm_vs_ltr(rows: dict[str, str], ms, task: str, label: str = "") -> str:
    """Table 5's MLM rows against its left-to-right rows on ``task`` (the paper: MLM ahead on SQuAD); ``rows``
    maps Table 5's roles to models (those it lacks are left out)."""
    parts = []
    mlms, ltrs = (
        [rows[r] for r in ("mlm+nsp", "mlm") if r in rows],
        [rows[r] for r in ("ltr", "ltr+bilstm") if r in rows],
    )
    for m in mlms:
        for ltr in ltrs:
            a, b = ms(m, task), ms(ltr, task)
            if a is None or b is None:
                parts.append(f"{m} vs {ltr}: {NOT_RUN}")
            else:
                parts.append(
                    f"{m} vs {ltr}: {a[0] - b[0]:+.1f} ({'reproduces' if a[0] > b[0] else 'does NOT reproduce'})"
                )
    return f"- **MLM beats left-to-right on {task}**{label}: " + "; ".join(parts) + "."


def _pretraining_spent(results: dict[str, dict], matrix: Matrix, model: str) -> tuple[float, float] | None:
    """(tokens, training CPU seconds) of all the pre-training behind the weights ``model`` fine-tunes: a
    continued run's own plus those of the run it continued (one level: a continued run cannot be continued);
    None before its pre-training result exists."""
    r = results.get(f"pretrain/{weights_of(matrix.raw, model)}")
    if not r or not r.get("tokens"):
        return None
    start = results.get(f"pretrain/{r['continued_from']}", {}) if r.get("continued_from") else {}
    tokens = r["tokens"] + (r.get("tokens_before") or 0)
    return tokens, r.get("train_cpu_s", 0.0) + start.get("train_cpu_s", 0.0)


def mlm_vs_ltr_by_budget(
    matrix: Matrix, results: dict[str, dict], ms, task: str, label: str = ""
) -> str | None:
    """Table 5's MLM-vs-LTR gaps on ``task`` at its budget and again with the rows pre-trained for longer
    (``table5_more_tokens``): whether a gap MLM loses at the first budget narrows as both models read more.
    None without such rows on ``task``."""
    more, rows = matrix.raw.get("table5_more_tokens") or {}, table5_models(matrix)
    parts = []
    for m in ("mlm+nsp", "mlm"):
        for ltr in ("ltr", "ltr+bilstm"):
            if m not in more or ltr not in more:
                continue
            budgets = []
            for a_name, b_name in ((rows[m], rows[ltr]), (more[m], more[ltr])):
                a, b = ms(a_name, task), ms(b_name, task)
                spent = [_pretraining_spent(results, matrix, x) for x in (a_name, b_name)]
                if a is None or b is None or None in spent or spent[0][0] != spent[1][0]:
                    break  # not run yet, or the two rows read different budgets: no like-for-like gap
                budgets.append((spent[0][0], a[0] - b[0], beyond_spread(a, b), spent[0][1], spent[1][1]))
            pair = f"{rows[m]} vs {rows[ltr]}, then {more[m]} vs {more[ltr]}"
            if len(budgets) < 2:
                parts.append(f"{pair}: {NOT_RUN}")
                continue
            (t0, d0, _, *cpu0), (t1, d1, beyond, *cpu1) = budgets
            parts.append(f"{pair}: {d0:+.1f} at {t0 / 1e6:.1f}M tokens, {d1:+.1f} at {t1 / 1e6:.1f}M (MLM's margin "
                         f"{d1 - d0:+.1f}; {'reproduces' if d1 > 0 else 'does NOT reproduce'} at {t1 / 1e6:.1f}M"
                         f"{'' if beyond else ', inside the spread'}; pre-training CPU s, MLM / LTR: "
                         f"{cpu0[0]:.0f} / {cpu0[1]:.0f}, then {cpu1[0]:.0f} / {cpu1[1]:.0f})")  # fmt: skip
    if not parts:
        return None
    return (f"- **MLM vs left-to-right as pre-training goes on, {task}**{label} (MLM minus LTR at each budget, the "
            "same tokens for both; the paper's Figure 5: MLM converges marginally more slowly than LTR yet leads "
            "it on MNLI almost from the start): " + "; ".join(parts) + ".")  # fmt: skip


def pooling_effect(
    matrix: Matrix, ms, pairs: list[tuple[str, str]], tasks: list[str], label: str = ""
) -> str | None:
    """Pre-trained minus random init fine-tuned with the classifier on [CLS] (the paper's) and again on the
    mean of the last layer, for each pair of ``pairs`` (pre-trained, its same-shape random) whose models both
    pool by the mean (``head = { classifier_pooling = "mean" }``) over the [CLS] pair of the weights they
    share. None without such a pair."""
    specs = {m["name"]: m for m in matrix.raw["model"]}
    parts = []
    for m, rnd in pairs:
        if any((specs[x].get("head") or {}).get("classifier_pooling") != "mean" for x in (m, rnd)):
            continue
        cls_m, cls_rnd = weights_of(matrix.raw, m), weights_of(matrix.raw, rnd)
        gaps = []
        for t in tasks:
            four = [ms(x, t) for x in (cls_m, cls_rnd, m, rnd)]
            if None in four:
                continue
            a, b, c, d = four
            gaps.append(f"{t} {a[0] - b[0]:+.1f} -> {c[0] - d[0]:+.1f}"
                        f"{' (beyond the spread)' if beats(c, d) else ''}")  # fmt: skip
        parts.append(f"{cls_m} vs {cls_rnd}, then {m} vs {rnd}: " + (", ".join(gaps) or NOT_RUN))
    if not parts:
        return None
    return (f"- **[CLS] or the mean of the last layer**{label} (pre-trained minus random init of its shape, "
            "fine-tuned with the classifier on [CLS] as the paper, then on the mean over the real tokens): "
            + "; ".join(parts) + ".")  # fmt: skip


def nsp_effect(rows: dict[str, str], ms, tasks: list[str], label: str = "") -> str:
    """The NSP effect (MLM + NSP minus MLM only) on each of ``tasks``, as one finding line."""
    parts = []
    for t in tasks:
        a, b = ms(rows["mlm+nsp"], t), ms(rows["mlm"], t)
        parts.append(f"{t}: {NOT_RUN}" if a is None or b is None else f"{t} {a[0] - b[0]:+.1f}")
    return (f"- **NSP effect**{label} (MLM + NSP minus MLM only; the paper: NSP helps QNLI, MNLI and SQuAD): "
            + "; ".join(parts) + ".")  # fmt: skip


def same_budget_downstream(spec: dict, ms, tasks: list[str]) -> str:
    """bertkit's same-CPU model against transformers' (``spec``, a ``runner = "transformers"`` model) on
    ``tasks``: each gap, and whether bertkit's is at least as good everywhere (the issue's must-show)."""
    gaps = []  # (task, bertkit minus transformers, whether the gap exceeds the seeds' spread)
    for t in tasks:
        x, y = ms(spec["same_cpu_as"], t), ms(spec["name"], t)
        if x is not None and y is not None:
            gaps.append((t, x[0] - y[0], beyond_spread(x, y)))
    listed = ", ".join(f"{t} {d:+.1f}{'' if beyond else ' (inside the spread)'}" for t, d, beyond in gaps)
    worse = [t for t, d, _ in gaps if d < 0]
    if worse:  # strict: any gap below counts; the reader learns whether each lies within the seeds' noise
        noise = (
            ""
            if any(b for t, d, b in gaps if d < 0)
            else ", though every gap below is inside the seeds' spread"
        )
        return f"{listed}: below transformers on {', '.join(worse)} (NOT at least as good{noise})"
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
               f"{tally(wins)}): " + "; ".join(verdicts) + ".")  # fmt: skip
    out += [mlm_vs_ltr(rows, ms, t) for t in ("SQuAD-v1.1", "CoNLL-2003") if t in tasks]
    out.append(nsp_effect(rows, ms, tasks))
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
    out += table7_finding(
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
                   f"{same_budget_downstream(spec, ms, tasks)}.")  # fmt: skip
    return out + [""]
