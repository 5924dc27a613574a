"""The paper report (``report_kind = "paper"``): set-up and provenance, findings, Tables 5-7, figures, the
recipe table and the BERT-Base estimate on paper."""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.errors import UserError
from lab.experiment import Matrix, task_models
from lab.report.findings import findings
from lab.report.front import notes, provenance
from lab.report.plots import plot_bars, plot_curves
from lab.report.protocols import (
    SHORT_PROTOCOL,
    protocol_bars,
    protocol_finding,
    protocol_table,
)
from lab.report.scores import NOT_RUN, metric_name, protocol_tasks, protocols, table5_models
from lab.report.tables import compare, other_models, paper_table5, pretrain_rows, table5, table6, table7


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


def measured_gpu_mfu(matrix: Matrix) -> list[dict]:
    """The GPU bench's rows that measured an MFU, from the file or files the config's ``gpu_bench`` names
    (``python -m benchmarks.bench_gpu`` outputs, one JSON row per line, relative to the config): one per
    sequence length, the first file's first; [] without ``gpu_bench``. The rows must come from one kind of
    GPU, since the estimate adds up their phases' hours."""
    import json

    names = matrix.raw.get("gpu_bench") or []
    rows: dict[int, dict] = {}
    for name in [names] if isinstance(names, str) else names:
        path = matrix.base / name
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            found = [json.loads(line) for line in lines if line.strip()]
        except (OSError, ValueError) as e:
            raise UserError(f"{matrix.path}: gpu_bench = {name!r}: cannot read {path}: {e}") from None
        for row in found:
            if row.get("ours_mfu"):
                # shown from the repository's root, as the report's other paths are (the config sits in experiments/)
                rows.setdefault(
                    row.get("seq_len", 0), {**row, "file": os.path.relpath(path, matrix.base.parent)}
                )
    devices = sorted({r["device_name"] for r in rows.values()})
    if len(devices) > 1:
        raise UserError(f"{matrix.path}: gpu_bench: the files measured different GPUs ({', '.join(devices)}); "
                        "name files of one GPU")  # fmt: skip
    return list(rows.values())


def _phase_mfu(rows: list[dict], seq_len: int) -> tuple[float, str]:
    """The MFU for a pre-training phase of ``seq_len`` tokens and where it comes from: the bench row measured at
    that length, else the first row's, said to be borrowed."""
    row = next((r for r in rows if r.get("seq_len") == seq_len), None)
    if row is None:
        first = rows[0]
        return first["ours_mfu"], f"the {first.get('seq_len', '?')}-token MFU: this length was not measured"
    how = "compiled" if row.get("compiled") else "eager"
    where = f"BERT-base, {row.get('sequences', '?')} x {seq_len}, bf16, {how}; `{row['file']}`"
    return row["ours_mfu"], f"{where}; transformers {row.get('ref_mfu', 0):.0%} on the same step"


def base_estimate(matrix: Matrix) -> list[str]:
    """What BERT-Base as published costs: tokens, FLOPs (bertkit.flops.training_flops), GPU-hours at the
    MFU the GPU bench measured for each phase's sequence length (the config's ``gpu_bench``), else at its goal
    of 40%, said to be assumed."""
    from bertkit.config import BertConfig
    from bertkit.flops import PEAK_BF16_TFLOPS, training_flops

    c = BertConfig.preset("base")
    phases = [(900_000, 128, 20), (100_000, 512, 80)]  # steps, sequence length, masked positions per sequence
    tokens = sum(s * 256 * n for s, n, _ in phases)
    phase_flops = [s * training_flops(c, [n] * 256, 256 * k) for s, n, k in phases]
    flops = sum(phase_flops)
    measured = measured_gpu_mfu(matrix)
    if measured:
        gpu, peak = measured[0]["device_name"], measured[0]["peak_tflops"] * 1e12
        mfus = [_phase_mfu(measured, n) for _, n, _ in phases]
        hours = sum(f / (peak * m) for f, (m, _) in zip(phase_flops, mfus)) / 3600
        at = " and ".join(
            f"{m:.0%} MFU for the {n}-token phase ({why})" for (_, n, _), (m, why) in zip(phases, mfus)
        )
        where = f"{at}, the MFUs `python -m benchmarks.bench_gpu` measured there"
    else:
        gpu, peak = "H100", dict(PEAK_BF16_TFLOPS)["H100"] * 1e12
        hours = flops / (peak * 0.40) / 3600
        where = "40% MFU, the GPU bench's goal; the bench has not been run on a GPU, so this MFU is assumed, not measured"
    return [
        f"- tokens: 900k steps x 256 x 128 + 100k steps x 256 x 512 = **{tokens / 1e9:.1f}B tokens** "
        "(the paper's 1M steps of 256 sequences, 90% at 128 tokens, 10% at 512)",
        f"- FLOPs (`training_flops` of `bertkit/flops.py`: forward + backward, MLM head on the masked rows "
        f"only): **{flops:.2e}**",
        f"- one {gpu} (dense bf16 peak {peak / 1e12:.0f} TFLOP/s) at {where}: **{hours:,.0f} "
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


def paper_report(matrix: Matrix, results: dict[str, dict], doc: Path, config_arg: str, folder: Path) -> str:
    """The paper report's Markdown (``report_kind = "paper"``); its figures are written beside ``doc``."""
    size = matrix.raw.get("report_size", "mini")
    rows = set(table5_models(matrix).values())
    tasks = [t["name"] for t in matrix.raw.get("task", [])
             if rows & set(task_models(matrix.raw, t)) and not t.get("protocol")]  # fmt: skip
    lines = [f"# {matrix.raw.get('description', matrix.name)}", ""]
    lines += provenance(matrix, results, config_arg, folder)
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
    found[1:1] = [line for name in others for line in protocol_finding(matrix, results, name)]
    lines += ["## Findings", ""]
    if headline:  # Table 5's protocol first; the main one's findings follow under their own heading
        lines += [f'### Fine-tuning as the paper does: protocol "{headline}" (Table 5)', ""]
        lines += protocol_finding(matrix, results, headline) + [""]
        lines += [f"### {SHORT_PROTOCOL}", ""]
    lines += found + notes(matrix)
    lines += pretrain_rows(matrix, results)
    short_title = f"## Table 5 — pre-training tasks (BERT-{size}, dev, mean ± std over seeds)"
    if headline:
        title = (f"## Table 5 — pre-training tasks (BERT-{size}, dev, mean ± std over seeds; fine-tuning protocol "
                 f'"{headline}", the rate the grid picked on dev)')  # fmt: skip
        lines += protocol_table(matrix, results, headline, title) + paper_table5()
        lines += protocol_bars(matrix, results, doc, headline)
        short_title = f"## Table 5 under the {SHORT_PROTOCOL[0].lower()}{SHORT_PROTOCOL[1:]}"
    lines += [short_title, ""]
    lines += table5(matrix, results, size, tasks)
    for name in others:
        lines += protocol_table(matrix, results, name) + protocol_bars(matrix, results, doc, name)
    lines += ["## Table 6 — model size (MLM + NSP, same tokens)", ""] + table6(matrix, results)
    lines += ["## Table 7 — feature-based vs fine-tuning (CoNLL-2003)", ""] + table7(matrix, results)
    lines += ["## Same CPU budget against transformers", "",
              "Both pre-train the MLM-only model (same corpus documents, vocabulary, shape, batch, learning rate, "
              "warm-up fraction, weight decay, clipping) for the same process CPU seconds of training at the same "
              "thread count (CPU seconds, not wall-clock: the machine was shared; on an idle machine with one "
              "thread the two are equal). transformers' side is its own pipeline (`experiments/transformers_mlm.py`: "
              "BertTokenizerFast, DataCollatorForLanguageModeling, BertForMaskedLM, Trainer); both models are "
              "scored on the same held-out masks and fine-tuned by the same bertkit code.", ""]  # fmt: skip
    # Table 5's protocol first, where there is one (its rows are the ones the findings judge), then the short one
    headline_tasks = [t["name"] for t in protocol_tasks(matrix, headline)] if headline else []
    lines += compare(matrix, results, headline_tasks + tasks)
    lines += other_models(matrix, results)
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
    lines += ["## BERT-Base as published, on paper", ""] + base_estimate(matrix)
    return "\n".join(lines)


def _grid_text(matrix: Matrix) -> str:
    """Which tasks pick their learning rate from a grid, in words (from the config)."""
    gridded = [t["name"] for t in matrix.raw.get("task", [])
               if isinstance(t.get("lr"), list) and len(t["lr"]) > 1 and not t.get("freeze_encoder")]  # fmt: skip
    if not gridded:
        return "every task at one learning rate"
    return (f"the learning rate of {', '.join(gridded)} is picked on dev from a grid on the first seed, then used "
            "for every seed (the paper's practice)")  # fmt: skip
