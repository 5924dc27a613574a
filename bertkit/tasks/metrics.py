"""Evaluation metrics of the paper's tasks, in pure Python (no scipy / sklearn).

- ``accuracy``, ``binary_f1`` (F1 of the positive class), ``matthews_corrcoef`` (CoLA),
  ``pearson`` / ``spearman`` (STS-B; Spearman uses average ranks for ties),
- ``conll_entities`` / ``conll_scores``: entity-level precision/recall/F1 with the semantics of the
  CoNLL ``conlleval`` script (chunk boundaries from tag prefixes B/I/E/S/O; works on IOB1, IOB2 and IOBES;
  an entity counts as correct only if type, start and end all match).
- ``glue_metrics(task, preds, labels)`` picks the official metric set of a GLUE task.
All scores are fractions in [0, 1] (multiply by 100 for the paper's tables).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def accuracy(preds: Sequence, labels: Sequence) -> float:
    if len(preds) != len(labels):
        raise ValueError(f"{len(preds)} predictions but {len(labels)} labels")
    if not labels:
        return 0.0
    return sum(p == y for p, y in zip(preds, labels)) / len(labels)


def binary_f1(preds: Sequence, labels: Sequence, positive=1) -> float:
    """F1 of the positive class (GLUE's MRPC/QQP F1)."""
    tp = sum(p == positive and y == positive for p, y in zip(preds, labels))
    fp = sum(p == positive and y != positive for p, y in zip(preds, labels))
    fn = sum(p != positive and y == positive for p, y in zip(preds, labels))
    return _f1(tp, fp, fn)


def _f1(tp: int, fp: int, fn: int) -> float:
    if tp == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2 * precision * recall / (precision + recall)


def _prf(correct: int, gold: int, predicted: int) -> dict[str, float]:
    """Precision, recall and F1 from the counts of correct, gold and predicted entities."""
    return {
        "precision": correct / predicted if predicted else 0.0,
        "recall": correct / gold if gold else 0.0,
        "f1": _f1(correct, predicted - correct, gold - correct),
    }


def macro_f1(preds: Sequence, labels: Sequence) -> float:
    """Unweighted mean over the gold classes of each class's F1."""
    classes = sorted(set(labels), key=repr)
    if not classes:
        return 0.0
    return sum(binary_f1(preds, labels, positive=c) for c in classes) / len(classes)


def matthews_corrcoef(preds: Sequence, labels: Sequence) -> float:
    """Matthews correlation coefficient, multiclass form (Gorodkin 2004); equals the binary formula
    (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) for two classes; 0 when undefined."""
    n = len(labels)
    if n == 0:
        return 0.0
    classes = sorted(set(labels) | set(preds), key=repr)
    t = Counter(labels)  # true counts per class
    p = Counter(preds)  # predicted counts per class
    correct = sum(a == b for a, b in zip(preds, labels))
    cov_ytyp = correct * n - sum(t[k] * p[k] for k in classes)
    cov_ypyp = n * n - sum(p[k] ** 2 for k in classes)
    cov_ytyt = n * n - sum(t[k] ** 2 for k in classes)
    if cov_ypyp == 0 or cov_ytyt == 0:
        return 0.0
    return cov_ytyp / math.sqrt(cov_ytyt * cov_ypyp)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    if n != len(y):
        raise ValueError(f"lengths differ: {n} vs {len(y)}")
    if n < 2:
        return 0.0
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return 0.0
    return sxy / math.sqrt(sxx * syy)


def rankdata(x: Sequence[float]) -> list[float]:
    """1-based ranks, ties get the average of the ranks they span (scipy's 'average' method)."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho = Pearson correlation of the (tie-averaged) ranks."""
    return pearson(rankdata(x), rankdata(y))


# ----------------------------------------------------------------------------------------------- conlleval


def _split_tag(tag: str) -> tuple[str, str]:
    if tag in ("O", "", None):
        return "O", ""
    if "-" in tag:
        prefix, typ = tag.split("-", 1)
        return prefix, typ
    # a bare type with no prefix (raw tags): conlleval treats it as I-TYPE
    return "I", tag


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, typ: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag != "O" and prev_type != typ


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, typ: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and prev_type != typ


def conll_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities ``(type, start, end_exclusive)`` of one sentence's tag sequence, as conlleval sees them."""
    chunks = []
    prev_tag, prev_type, start = "O", "", None
    for i, t in enumerate(list(tags) + ["O"]):
        tag, typ = _split_tag(t)
        if start is not None and _end_of_chunk(prev_tag, tag, prev_type, typ):
            chunks.append((prev_type, start, i))
            start = None
        if _start_of_chunk(prev_tag, tag, prev_type, typ):
            start = i
        prev_tag, prev_type = tag, typ
    return chunks


def conll_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """conlleval over sentences: overall precision/recall/f1 (fractions), token accuracy, and per type."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    tp: Counter = Counter()
    n_gold: Counter = Counter()
    n_pred: Counter = Counter()
    tokens = correct_tokens = 0
    for g, p in zip(gold, pred):
        if len(g) != len(p):
            raise ValueError(f"sentence lengths differ: {len(g)} gold tags vs {len(p)} predicted")
        ge, pe = set(conll_entities(g)), set(conll_entities(p))
        for e in ge:
            n_gold[e[0]] += 1
        for e in pe:
            n_pred[e[0]] += 1
        for e in ge & pe:
            tp[e[0]] += 1
        tokens += len(g)
        correct_tokens += sum(a == b for a, b in zip(g, p))
    T, G, P = sum(tp.values()), sum(n_gold.values()), sum(n_pred.values())
    return {
        **_prf(T, G, P),
        "accuracy": correct_tokens / tokens if tokens else 0.0,
        "gold_entities": G,
        "predicted_entities": P,
        "correct_entities": T,
        "per_type": {
            typ: {**_prf(tp[typ], n_gold[typ], n_pred[typ]), "support": n_gold[typ]}
            for typ in sorted(set(n_gold) | set(n_pred))
        },
    }


# ----------------------------------------------------------------------------------------------- tasks


def classification_metrics(preds: Sequence, labels: Sequence) -> dict[str, float]:
    """Generic classification: accuracy and macro-F1 (plus the positive class's F1 for 0/1 labels)."""
    out = {"accuracy": accuracy(preds, labels), "macro_f1": macro_f1(preds, labels)}
    if set(map(str, labels)) <= {"0", "1"}:
        out["f1"] = binary_f1([str(p) for p in preds], [str(y) for y in labels], positive="1")
    return out


def regression_metrics(preds: Sequence[float], labels: Sequence[float]) -> dict[str, float]:
    p, y = [float(v) for v in preds], [float(v) for v in labels]
    mse = sum((a - b) ** 2 for a, b in zip(p, y)) / max(1, len(y))
    return {"pearson": pearson(p, y), "spearman": spearman(p, y), "mse": mse}


def ner_metrics(preds: Sequence[Sequence[str]], labels: Sequence[Sequence[str]]) -> dict:
    return conll_scores(labels, preds)


def glue_metrics(task: str, preds: Sequence, labels: Sequence) -> dict[str, float]:
    """The official GLUE metric set of ``task`` (name as in ``bertkit.tasks.glue.TASKS``)."""
    key = task.lower().replace("-", "")
    if key == "cola":
        return {"mcc": matthews_corrcoef(preds, labels), "accuracy": accuracy(preds, labels)}
    if key in ("mrpc", "qqp"):
        return {"f1": binary_f1(preds, labels, positive="1"), "accuracy": accuracy(preds, labels)}
    if key == "stsb":
        p, y = [float(v) for v in preds], [float(v) for v in labels]
        return {"pearson": pearson(p, y), "spearman": spearman(p, y)}
    return {"accuracy": accuracy(preds, labels)}
