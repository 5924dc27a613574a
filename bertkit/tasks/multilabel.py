"""Multi-label classification (``finetune classify --multi-label``): any number of labels per text.

The model scores every label independently (one logit each, binary cross-entropy on multi-hot targets:
``problem_type = "multi_label_classification"``, as transformers names it); a label is predicted when its
sigmoid probability reaches that label's threshold. Thresholds start at 0.5; :func:`tune_thresholds` picks,
for each label on its own, the threshold that maximises that label's F1 on a labelled set (ties: the one
nearest 0.5). The fine-tuned model keeps them in ``config.json`` (``label_thresholds``) for ``predict``.

Scores (:func:`multilabel_metrics`): micro F1 (true/false positives and false negatives summed over all
labels), macro F1 (the mean of the per-label F1s; a label never predicted nor present scores 1), and subset
accuracy (the whole label set exactly right).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

THRESHOLDS_KEY = "label_thresholds"


def _f1(tp: int, fp: int, fn: int) -> float:
    return 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def multilabel_metrics(labels: Sequence[str]) -> Callable[[list, list], dict[str, float]]:
    """``metric(preds, gold)`` over lists of label-name lists."""

    def metric(preds: list, gold: list) -> dict[str, float]:
        if len(preds) != len(gold):
            raise ValueError(f"{len(preds)} predictions but {len(gold)} label sets")
        counts = {lab: [0, 0, 0] for lab in labels}  # tp, fp, fn
        exact = 0
        for p, g in zip(preds, gold):
            ps, gs = set(p), set(g)
            exact += ps == gs
            for lab in ps | gs:
                c = counts.setdefault(lab, [0, 0, 0])
                c[0 if lab in ps and lab in gs else 1 if lab in ps else 2] += 1
        tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
        return {
            "micro_f1": _f1(tp, fp, fn),
            "macro_f1": sum(_f1(*c) for c in counts.values()) / max(len(counts), 1),
            "subset_accuracy": exact / max(len(gold), 1),
        }

    return metric


def decide(
    probs: Sequence[float], labels: Sequence[str], thresholds: Sequence[float] | None = None
) -> list[str]:
    """The labels whose probability reaches their threshold (0.5 each when none are given)."""
    t = thresholds or [0.5] * len(labels)
    return [lab for lab, p, th in zip(labels, probs, t) if p >= th]


def tune_thresholds(
    probs: Sequence[Sequence[float]], gold: Sequence[Sequence[str]], labels: Sequence[str]
) -> list[float]:
    """Per label, the threshold with the best F1 of that label on (``probs``, ``gold``): candidates are the
    midpoints between consecutive distinct probabilities (and 0.5); ties go to the one nearest 0.5."""
    out = []
    for j, lab in enumerate(labels):
        scores = sorted({float(p[j]) for p in probs})
        cands = {0.5} | {(a + b) / 2 for a, b in zip(scores, scores[1:])}
        if scores:
            cands |= {scores[0] / 2, (scores[-1] + 1) / 2}
        truth = [lab in g for g in gold]
        best = None
        for t in sorted(cands):
            tp = sum(1 for p, y in zip(probs, truth) if p[j] >= t and y)
            fp = sum(1 for p, y in zip(probs, truth) if p[j] >= t and not y)
            fn = sum(1 for p, y in zip(probs, truth) if p[j] < t and y)
            key = (_f1(tp, fp, fn), -abs(t - 0.5))
            if best is None or key > best[0]:
                best = (key, t)
        out.append(round(best[1], 6) if best else 0.5)
    return out
