"""Real-scale parity of the server's /qa and /ner with the fine-tuning runs' own evaluation (issue 13).

    python -m experiments.serve_parity --model MODEL_DIR --data ../shared/data --work /tmp/serve-parity \\
        --out experiments/results/serve-parity/RESULT.json

1. ``bertkit finetune squad`` on the article split of SQuAD v1.1 dev (train on the first ``--train-articles``,
   evaluate on the last ``--dev-articles``, as experiments/paper-mini.toml's SQuAD task), and
   ``bertkit finetune ner`` on CoNLL-2003 (the first-seeded random ``--max-train-examples`` of train, all of
   valid). Each writes its own official scores (``metrics.json``) and per-example predictions.
2. ``bertkit serve`` on each fine-tuned model in a real subprocess (uvicorn on loopback), with
   ``--max-length`` = the fine-tuning ``--max-seq-length`` (the server's QA window and query length follow
   from it) and the fine-tuning ``doc_stride`` sent with every /qa request.
3. Every dev question goes through ``POST /qa`` and every dev sentence (its words) through ``POST /ner``
   (``aggregation="first"``, what the tagger was trained on), ``--concurrency`` requests at a time over
   httpx, so the server's cross-request batching merges them.
4. EM/F1 (the official v1.1 metric, ``bertkit.tasks.squad_metrics``) and conlleval entity F1
   (``bertkit.tasks.metrics.conll_scores``) are computed from the route outputs and compared with the
   fine-tuning runs' own: the scores must be equal and every differing example is listed.

Fine-tuned runs already finished under ``--work`` are reused (their ``metrics.json`` is there); the result
JSON is never overwritten unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bertkit.serving.launch import ServerProcess

ROOT = Path(__file__).resolve().parents[1]

# experiments/paper-mini.toml's SQuAD and CoNLL settings for the mini models
SQUAD = {
    "epochs": 2,
    "batch_size": 32,
    "lr": 3e-4,
    "max_seq_length": 128,
    "doc_stride": 64,
    "max_query_length": 32,
}
NER = {"epochs": 2, "batch_size": 32, "lr": 3e-4, "max_seq_length": 128}


# ------------------------------------------------------------------------------------------------ comparison


def compare_squad(
    dev: dict, finetune_preds: dict[str, str], finetune_metrics: dict, served: dict[str, str]
) -> dict[str, Any]:
    """Scores of the served answers against the fine-tuning run's, and every question whose answer differs.

    ``dev``: the SQuAD JSON the run evaluated on; ``finetune_preds`` / ``served``: question id -> answer
    text; ``finetune_metrics``: the run's own ``metrics`` (``exact``, ``f1``)."""
    from bertkit.tasks.squad_metrics import evaluate

    missing = sorted(set(finetune_preds) - set(served))
    served_metrics = evaluate(dev, served, version="1.1")
    mismatches = [
        {"id": q, "finetune": finetune_preds[q], "served": served.get(q)}
        for q in sorted(finetune_preds)
        if served.get(q) != finetune_preds[q]
    ]
    keys = ("exact", "f1")
    return {
        "questions": len(finetune_preds),
        "served": len(served),
        "missing": missing,
        "finetune": {k: finetune_metrics[k] for k in keys},
        "served_metrics": {k: served_metrics[k] for k in keys},
        "mismatches": mismatches,
        "equal": not mismatches
        and not missing
        and all(served_metrics[k] == finetune_metrics[k] for k in keys),
    }


def compare_ner(
    gold: Sequence[Sequence[str]],
    finetune_tags: Sequence[Sequence[str]],
    finetune_metrics: dict,
    served_tags: Sequence[Sequence[str] | None],
    words: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """conlleval scores of the served tags against the fine-tuning run's, and every sentence that differs.

    All sequences are per dev sentence; ``served_tags[i]`` is None when the route gave no answer for it;
    ``finetune_metrics``: the run's own ``metrics`` (``f1``, ``precision``, ``recall``)."""
    from bertkit.tasks.metrics import conll_scores

    if not len(gold) == len(finetune_tags) == len(served_tags) == len(words):
        raise ValueError("gold, fine-tuning tags, served tags and words must hold one entry per sentence")
    missing = [i for i, t in enumerate(served_tags) if t is None]
    filled = [list(t) if t is not None else ["O"] * len(g) for t, g in zip(served_tags, gold)]
    s = conll_scores(gold, filled)
    own = conll_scores(gold, finetune_tags)
    mismatches = [
        {"index": i, "words": list(words[i]), "finetune": list(finetune_tags[i]), "served": served_tags[i]}
        for i in range(len(gold))
        if served_tags[i] is None or list(served_tags[i]) != list(finetune_tags[i])
    ]
    keys = ("f1", "precision", "recall")
    return {
        "sentences": len(gold),
        "missing": missing,
        "finetune": {k: finetune_metrics[k] for k in keys if k in finetune_metrics},
        "finetune_rescored": {k: own[k] for k in keys},
        "served_metrics": {
            k: s[k] for k in (*keys, "correct_entities", "predicted_entities", "gold_entities")
        },
        "mismatches": mismatches,
        "equal": not mismatches
        and not missing
        and all(s[k] == finetune_metrics.get(k, own[k]) for k in keys),
    }


# ------------------------------------------------------------------------------------------------ processes


def _python() -> list[str]:
    return [sys.executable, "-m", "bertkit"]


def _run(cmd: list[str], log: Path) -> None:
    print("$", " ".join(cmd), flush=True)
    with open(log, "wb") as f:
        r = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")


def finetune_squad(
    model: Path, data: Path, out: Path, train_articles: int, dev_articles: int, seed: int
) -> list[str]:
    cmd = [*_python(), "finetune", "squad", "--model", str(model), "--out", str(out), "--quiet",
           "--train", str(data / "squad" / "dev-v1.1.json"), "--train-articles", str(train_articles),
           "--dev-articles", str(dev_articles), "--seed", str(seed),
           *[f"--{k.replace('_', '-')}={v}" for k, v in SQUAD.items()]]  # fmt: skip
    if not (out / "metrics.json").is_file():
        _run(cmd, out.parent / "finetune-squad.log")
        cmd.append("# ran now")
    return cmd


def finetune_ner(model: Path, data: Path, out: Path, max_train: int, seed: int) -> list[str]:
    cmd = [*_python(), "finetune", "ner", "--model", str(model), "--out", str(out), "--quiet",
           "--train", str(data / "conll2003" / "train.txt"), "--dev", str(data / "conll2003" / "valid.txt"),
           "--max-train-examples", str(max_train), "--seed", str(seed),
           *[f"--{k.replace('_', '-')}={v}" for k, v in NER.items()]]  # fmt: skip
    if not (out / "metrics.json").is_file():
        _run(cmd, out.parent / "finetune-ner.log")
        cmd.append("# ran now")
    return cmd


class Served:
    """``bertkit serve MODEL --max-length N`` on a free loopback port, and an httpx client to it."""

    def __init__(self, model: Path, max_length: int, log: Path) -> None:
        import httpx

        cmd = [*_python(), "serve", str(model), "--max-length", str(max_length), "--log-level", "warning"]
        try:
            self.process = ServerProcess(cmd, log=log, cwd=ROOT)
        except RuntimeError as e:
            raise SystemExit(f"{e}\n(full log: {log})") from None
        self.cmd = self.process.cmd
        self.client = httpx.Client(base_url=self.process.url, timeout=120)

    def post(self, path: str, body: dict) -> Any:
        r = self.client.post(path, json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()

    def close(self) -> None:
        self.client.close()
        self.process.stop(grace=30)


def _map(fn: Callable[[Any], Any], items: Sequence[Any], concurrency: int) -> tuple[list[Any], list[str]]:
    """fn over items, ``concurrency`` at a time; (results with None for failures, the failures' messages)."""
    errors: list[str] = []

    def safe(x: Any) -> Any:
        try:
            return fn(x)
        except Exception as e:  # noqa: BLE001  (every failure is reported in the result)
            errors.append(str(e))
            return None

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(safe, items)), errors


# ------------------------------------------------------------------------------------------------ main


def squad_parity(run: Path, concurrency: int) -> dict[str, Any]:
    from bertkit.tasks.squad_metrics import _questions

    dev = json.loads((run / "dev.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    preds = json.loads((run / "predictions.json").read_text())
    items = [
        (q["id"], q["question"], p["context"]) for a in dev["data"] for p in a["paragraphs"] for q in p["qas"]
    ]
    assert {q["id"] for q in _questions(dev["data"])} == {i for i, _, _ in items}
    hp = metrics["hyperparameters"]
    server = Served(run / "model", hp["max_seq_length"], run.parent / "serve-squad.log")
    try:
        info = server.client.get("/info").json()
        t0 = time.time()
        body = {"doc_stride": hp["doc_stride"], "max_answer_length": hp["max_answer_length"]}
        answers, errors = _map(
            lambda it: server.post("/qa", {"question": it[1], "context": it[2], **body}), items, concurrency
        )
        seconds = time.time() - t0
    finally:
        server.close()
    served = {qid: a["answer"] for (qid, _, _), a in zip(items, answers) if a is not None}
    r = compare_squad(dev, preds, metrics["metrics"], served)
    r.update(server=server.cmd[2:], errors=errors, http_seconds=round(seconds, 1), info_max_length=info.get("max_length"),
             request_fields=body, finetune_hyperparameters=hp)  # fmt: skip
    return r


def ner_parity(run: Path, max_length: int, concurrency: int) -> dict[str, Any]:
    metrics = json.loads((run / "metrics.json").read_text())
    rows = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines() if line.strip()]
    server = Served(run / "model", max_length, run.parent / "serve-ner.log")
    try:
        t0 = time.time()
        answers, errors = _map(
            lambda r: server.post("/ner", {"words": r["words"], "aggregation": "first"}), rows, concurrency
        )
        seconds = time.time() - t0
    finally:
        server.close()
    served = [a["tags"] if a is not None else None for a in answers]
    r = compare_ner([x["gold"] for x in rows], [x["pred"] for x in rows], metrics["metrics"], served,
                    [x["words"] for x in rows])  # fmt: skip
    r.update(server=server.cmd[2:], errors=errors, http_seconds=round(seconds, 1))
    return r


def _finetune_record(cmd: list[str], run: Path) -> dict[str, Any]:
    """The fine-tuning command, and whether this invocation ran it or reused a finished run in ``--work``."""
    ran = cmd[-1] == "# ran now"
    m = json.loads((run / "metrics.json").read_text())
    return {
        "finetune_command": cmd[2 : len(cmd) - ran],
        "finetune_ran_now": ran,
        "finetune_seconds": m.get("seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="pre-trained model dir (HF layout) to fine-tune")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="the shared data root")
    ap.add_argument("--work", required=True, help="where the fine-tuned runs and server logs go")
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--train-articles", type=int, default=16)
    ap.add_argument("--dev-articles", type=int, default=8)
    ap.add_argument("--max-train-examples", type=int, default=5000, help="CoNLL training sentences")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    ap.add_argument("--only", choices=("squad", "ner"), help="one of the two")
    args = ap.parse_args(argv)

    from lab.experiment import machine_info

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise SystemExit(f"{out} exists; pass --overwrite to replace it")
    model, data, work = Path(args.model), Path(args.data), Path(args.work)
    for need in (model / "config.json", data / "squad" / "dev-v1.1.json", data / "conll2003" / "valid.txt"):
        if not need.is_file():
            raise SystemExit(f"{need}: not found")
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "command": "python -m experiments.serve_parity " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": str(model),
        **machine_info(),
    }
    t0 = time.time()
    if args.only in (None, "squad"):
        cmd = finetune_squad(model, data, work / "squad", args.train_articles, args.dev_articles, args.seed)
        result["squad"] = {
            **_finetune_record(cmd, work / "squad"),
            **squad_parity(work / "squad", args.concurrency),
        }
    if args.only in (None, "ner"):
        cmd = finetune_ner(model, data, work / "ner", args.max_train_examples, args.seed)
        result["ner"] = {
            **_finetune_record(cmd, work / "ner"),
            **ner_parity(work / "ner", NER["max_seq_length"], args.concurrency),
        }
    result["seconds"] = round(time.time() - t0, 1)
    result["equal"] = all(result[k]["equal"] for k in ("squad", "ner") if k in result)
    from bertkit.io import atomic_write_json

    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)
    for k in ("squad", "ner"):
        if k in result:
            r = result[k]
            print(f"{k}: finetune {r['finetune']} served {r['served_metrics']} mismatches {len(r['mismatches'])} "
                  f"errors {len(r['errors'])}")  # fmt: skip
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
