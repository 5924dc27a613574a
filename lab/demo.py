"""``python -m lab.demo`` (what ``make run`` runs): BERT pre-training end to end, offline, in minutes on a CPU,
and proof that the model learned.

1. **Corpus.** The shared corpora (``../shared/data/corpus``: Gutenberg books + WikiText-2) when they are
   there, else the English documentation that ships with Python itself: the docstrings of the standard
   library, read from the installation's ``.py`` sources with :mod:`ast` (nothing imported or downloaded;
   no text stored in this repository). ``--corpus PATH...`` uses your own text files.
2. **Vocabulary** (WordPiece, ``bertkit vocab``) and **data** (token shards, ``bertkit prepare``).
3. **Pre-training** of a small BERT from scratch with MLM + NSP and the small-preset recipe (6% warm-up,
   batch 16: see :data:`bertkit.pretrain.RECIPES`; lr 1e-3, the rate the 2-layer demo model was checked at),
   for about ``--train-seconds``.
4. **Did it learn?** Fill-mask accuracy on held-out documents next to the unigram baseline (always the most
   frequent masked token: what a model that fills every blank with "the" scores), and how many distinct
   tokens it predicts; fill-mask predictions for a few sentences.
5. **Does it transfer?** Fine-tunes a pre-trained model and the same model from random initialisation alike,
   with 3 seeds each, and says whether the pre-trained model's worst seed beats random init's best. The model
   is the one bertkit pre-trained at length and keeps in ``models/bertkit-electra-modernbert-mini`` (its ``README.md``
   says how it was made), on STS-B (1,500 training pairs of ``../shared/data/glue/STS-B``, dev Pearson): a few
   minutes of step 3 rarely make a model that transfers beyond the seeds' spread. ``--transfer-model demo``
   fine-tunes step 3's model instead, once, on CoNLL-2003 NER (4,000 sentences, dev entity F1) and SST-2
   (2,000 sentences, dev accuracy). A task whose data is absent is skipped with the reason.

The report goes to ``--out`` (default ``runs/demo``): ``report.json`` (metrics, timings, predictions),
``curves.png``, ``metrics.jsonl``, ``model/``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import random
import re
import sys
import sysconfig
import time
from pathlib import Path

from bertkit.io import atomic_write, atomic_write_json

# Below this held-out word-order gain (nats) a model still reads its context as a bag of words, and its
# fine-tuning is not expected to beat random init (docs/results/checkpoint-probe.md: BERT-tiny leaves that plateau
# after ~16M tokens, then gains nats within a few thousand steps). The demo's time budget buys enough steps
# on 2 idle cores; on a busy or slow machine it may not, and the demo says so instead of implying a verdict.
WORD_ORDER_GAIN_TO_TRANSFER = 0.1
BAG_OF_WORDS_NOTE = (
    "after {steps} steps the model has not learned word order yet (it reads its context as a bag of words), "
    "so it is not expected to transfer to a task; the time budget bought few steps on this machine (busy or "
    "slow): run again with --steps 5000, about what 300 s buy on 2 idle cores"
)

# Sentences for the fill-mask show-case on the default corpus (their own words, about Python).
DEFAULT_PROBES = [
    "Return a new [MASK] containing the items of the iterable.",
    "If the file does not exist, an [MASK] is raised.",
    "This module provides functions for working with [MASK] and directories.",
    "The default value is [MASK].",
    "Raise a [MASK] if the argument is not an integer.",
]


# ------------------------------------------------------------------------------------------------ corpus


def _clean_docstring(doc: str) -> list[str]:
    """Paragraphs of prose from a docstring: drop doctest lines, code blocks and reST markup."""
    paras, cur = [], []
    for raw in doc.splitlines():
        line = raw.strip()
        if not line:
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        if line.startswith((">>>", "...", "$ ", "%", "|")) or re.fullmatch(r"[-=~^*#+]{3,}", line):
            continue
        if raw.startswith(("    ", "\t")) and not cur:
            continue  # an indented block after a blank line: code or a table
        cur.append(line)
    if cur:
        paras.append(" ".join(cur))
    out = []
    for p in paras:
        p = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", p)  # :func:`x` -> x
        p = p.replace("``", "").replace("`", "")
        letters = sum(ch.isalpha() for ch in p)
        if len(p) >= 20 and letters / max(len(p), 1) > 0.6:
            out.append(p)
    return out


def _split_sentences(text: str) -> list[str]:
    try:
        from bertkit.data.corpus import split_sentences

        return split_sentences(text)
    except ImportError:
        return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if s]


def python_docs_corpus(out_file: str | os.PathLike, max_bytes: int = 6_000_000) -> dict:
    """Write the standard library's docstrings to ``out_file`` (one module per document). Returns stats."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in stdlib.rglob("*.py")
        if not any(
            part in ("test", "tests", "idlelib", "site-packages", "lib2to3", "__pycache__")
            for part in p.parts
        )
    )
    docs = 0
    sentences = 0
    size = 0
    with atomic_write(out_file) as f:
        for path in files:
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except (SyntaxError, ValueError):
                continue
            paras: list[str] = []
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=True)
                    if doc:
                        paras.extend(_clean_docstring(doc))
            lines = [s for p in paras for s in _split_sentences(p) if len(s.split()) >= 3]
            if len(lines) < 2:
                continue
            text = "\n".join(lines) + "\n\n"
            f.write(text)
            docs += 1
            sentences += len(lines)
            size += len(text.encode())
            if size >= max_bytes:
                break
    if docs < 2:
        raise RuntimeError(f"found too little documentation under {stdlib} to build a corpus; pass --corpus")
    return {"source": f"docstrings of the Python {sys.version.split()[0]} standard library at {stdlib}",
            "documents": docs, "sentences": sentences, "bytes": size, "file": str(out_file)}  # fmt: skip


def build_data(
    corpus: list[str],
    work: Path,
    vocab_size: int = 8000,
    max_seq_length: int = 128,
    progress: bool = True,
) -> tuple[Path, dict]:
    """Vocabulary + shards for ``corpus`` under ``work``; returns (data_dir, info)."""
    from bertkit.data.shards import prepare
    from bertkit.data.vocab import train_vocab

    vocab = work / "vocab.txt"
    data_dir = work / "data"
    t0 = time.perf_counter()
    vinfo = train_vocab(corpus, vocab_size, vocab, progress=progress)
    t1 = time.perf_counter()
    pinfo = prepare(corpus, vocab, data_dir, max_seq_length=max_seq_length, progress=progress)
    t2 = time.perf_counter()
    return data_dir, {
        "vocab": {k: v for k, v in vinfo.items() if isinstance(v, (int, float, str))},
        "prepare": {k: v for k, v in pinfo.items() if isinstance(v, (int, float, str))},
        "vocab_s": round(t1 - t0, 2),
        "prepare_s": round(t2 - t1, 2),
    }


def corpus_probes(corpus: list[str], n: int = 5, seed: int = 0) -> list[str]:
    """Sentences from a user's corpus with one longer word replaced by [MASK]."""
    from bertkit.data.corpus import read_documents

    docs = read_documents(corpus)
    sents = [s for d in docs for s in d if 6 <= len(s.split()) <= 25]
    rng = random.Random(seed)
    out = []
    for s in rng.sample(sents, min(n, len(sents))):
        words = s.split()
        cands = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 3]
        if cands:
            i = rng.choice(cands)
            out.append(" ".join(words[:i] + ["[MASK]"] + words[i + 1 :]))
    return out


def time_one_step(
    data_dir: Path, preset: str, overrides: dict, batch_size: int, seq: int, lr: float
) -> float:
    """Median seconds of a training step (forward, backward, AdamW) of this model on this data, after warm-up."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.data import PretrainingDataset
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.pretrain import make_loss_fn
    from bertkit.train.batches import Batches
    from bertkit.train.optim import build_optimizer

    ds = PretrainingDataset(data_dir, max_seq_length=seq)
    batches = Batches(ds, batch_size, ds.collate, seed=12345)
    rng = torch.get_rng_state()
    model = BertForPreTraining(BertConfig.preset(preset, vocab_size=ds.vocab_size, **overrides))
    opt = build_optimizer(model, lr=lr)
    loss_fn = make_loss_fn("mlm+nsp")
    times = []
    for i in range(8):
        batch = next(batches)
        t = time.perf_counter()
        loss, _ = loss_fn(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - t)
    torch.set_rng_state(rng)
    return sorted(times)[len(times) // 2]


def tiny_data(
    work: str | os.PathLike, max_bytes: int = 150_000, vocab_size: int = 1000, max_seq_length: int = 64
) -> Path:
    """A small prepared data directory from the first ``max_bytes`` of the stdlib-docstring corpus (tests)."""
    work = Path(work)
    if (work / "data" / "manifest.json").is_file():
        return work / "data"
    python_docs_corpus(work / "corpus.txt", max_bytes=max_bytes)
    data_dir, _ = build_data([str(work / "corpus.txt")], work, vocab_size, max_seq_length, progress=False)
    return data_dir


# -------------------------------------------------------------------------------------------------- main


def shared_data() -> Path | None:
    """``../shared/data`` beside the repository or the working directory, if there."""
    for base in (Path(__file__).resolve().parents[1], Path.cwd()):
        cand = base.parent / "shared" / "data"
        if (cand / "corpus").is_dir():
            return cand
    return None


def random_model(model_dir: Path, like: Path, seed: int) -> Path:
    """A model of the same architecture, shape and vocabulary as ``like`` (a BERT or a ModernBERT), randomly
    initialised (the transfer baseline)."""
    import shutil

    import torch

    from bertkit.architectures import is_modernbert, load_config, pretraining_class

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    pretraining_class(is_modernbert(like))(load_config(like)).save_pretrained(model_dir)
    torch.random.set_rng_state(state)
    for f in like.iterdir():
        if f.name not in ("config.json", "model.safetensors") and f.is_file():
            shutil.copyfile(f, model_dir / f.name)
    return model_dir


@dataclasses.dataclass(frozen=True)
class TransferTask:
    """A small real task of step 5: where its data lies under ../shared/data and how it is fine-tuned."""

    name: str  # as printed and in report.json
    path: str  # relative to the shared data folder
    metric: str  # the dev metric reported (a key of the task's metrics)
    examples: int  # training examples (a seeded subset)
    epochs: int
    lr: float  # the rate the plateau matrix's grid picked for this task for nearly every model

    def load(self, folder: Path):
        """The task's data (train and dev) from ``folder`` (this task's ``path`` under the shared data)."""
        if self.name == "CoNLL-2003":
            from bertkit.tasks.ner import ner_task_data

            return ner_task_data(folder / "train.txt", folder / "valid.txt", name=self.name)
        from bertkit.tasks.glue import glue_task_data

        return glue_task_data(self.name, folder)


TRANSFER_TASKS = (
    TransferTask("CoNLL-2003", "conll2003", "f1", 4000, 2, 1e-3),
    TransferTask("SST-2", "glue/SST-2", "accuracy", 2000, 2, 1e-4),
)

# The model bertkit pre-trained at length and keeps in the repository (models/*/README.md says how): step 5
# fine-tunes it, not the few-minute model of step 3, when it is there. Its task is the one where its card shows
# transfer; 3 seeds on each side so "beyond the seeds' spread" is a verdict, not a hope. The rate is the larger
# of the study's grid (experiments/pretrain-study.toml), fixed before looking at this demo's numbers.
COMMITTED_MODEL = Path(__file__).resolve().parents[1] / "models" / "bertkit-electra-modernbert-mini"
COMMITTED_TRANSFER_TASKS = (TransferTask("STS-B", "glue/STS-B", "pearson", 1500, 3, 3e-4),)
COMMITTED_SEEDS = (0, 1, 2)


def transfer(
    model_dir: Path, random_dir: Path, shared: Path | None, out: Path, args, tasks=TRANSFER_TASKS,
    seeds: tuple[int, ...] | None = None,
) -> dict[str, dict | str]:  # fmt: skip
    """Each task's dev score (in %) of the pre-trained and the random model, fine-tuned alike with each seed:
    ``{task: {"metric": ..., "pretrained": mean, "random init": mean, "seeds": [...], "pretrained_scores":
    [...], "random_scores": [...], "beyond_spread": bool, "train_examples": n}}`` (``beyond_spread``: the
    pre-trained model's worst seed beats random init's best), or the reason a task was skipped (its data
    absent). ``seeds`` default to ``(args.seed,)``."""
    from bertkit.tasks.finetune import finetune
    from bertkit.tasks.spec import Settings

    seeds = tuple(seeds) if seeds else (args.seed,)
    res: dict[str, dict | str] = {}
    for task in tasks:
        folder = shared / task.path if shared is not None else None
        if folder is None or not folder.is_dir():
            res[task.name] = f"skipped: ../shared/data/{task.path} not found"
            print(f"      {task.name}: {res[task.name]}", flush=True)
            continue
        data = task.load(folder)
        scores: dict = {"metric": task.metric, "seeds": list(seeds)}
        for name, d in (("pretrained", model_dir), ("random init", random_dir)):
            runs = []
            for seed in seeds:
                s = Settings(epochs=task.epochs, batch_size=32, lr=args.finetune_lr or task.lr,
                             max_seq_length=args.max_seq_length, seed=seed,
                             max_train_examples=args.finetune_examples or task.examples, progress=not args.quiet)  # fmt: skip
                tag = f"{task.path.split('/')[-1].lower()}-{name.split()[0]}" + (
                    f"-{seed}" if len(seeds) > 1 else ""
                )
                r = finetune(data, d, out / tag, s)
                runs.append(round(100 * r["metrics"][task.metric], 2))
                scores["train_examples"] = r["train_examples"]
                print(f"      {task.name} dev {task.metric}, {name:11s} seed {seed}: {runs[-1]:.2f}  ({r['train_examples']} "
                      f"training examples, {task.epochs} epochs, {r['seconds']['train']:.0f} s)", flush=True)  # fmt: skip
            scores[name] = round(sum(runs) / len(runs), 2)
            scores[f"{name.split()[0]}_scores"] = runs
        scores["beyond_spread"] = min(scores["pretrained_scores"]) > max(scores["random_scores"])
        res[task.name] = scores
    return res


def transfer_plan(
    choice: str | None, demo_model: Path
) -> tuple[Path, tuple[TransferTask, ...], tuple[int, ...] | None]:
    """The model step 5 fine-tunes, its tasks and seeds: the committed model (3 seeds on its task) when
    ``choice`` is None or 'committed' and it is there, the demo's own model for 'demo' (or when none is
    committed), else the model directory ``choice`` names (with the committed model's tasks and seeds)."""
    if choice == "demo" or (choice is None and not (COMMITTED_MODEL / "config.json").is_file()):
        return demo_model, TRANSFER_TASKS, None
    path = COMMITTED_MODEL if choice in (None, "committed") else Path(choice)
    if not (path / "config.json").is_file():
        raise SystemExit(f"error: --transfer-model {choice}: {path} has no config.json")
    return path, COMMITTED_TRANSFER_TASKS, COMMITTED_SEEDS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="+", help="your own text files/directories (default: the shared corpora, "
                    "else Python's docs)")  # fmt: skip
    ap.add_argument("--out", default="runs/demo", help="report directory (default runs/demo)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: fit --train-seconds)")
    ap.add_argument(
        "--train-seconds",
        type=float,
        default=300.0,  # with set-up and two short fine-tunings, `make run` stays under 10 minutes on 2 cores
        help="without --steps: time a few steps first and train about this long (clamped to 200..6000 steps)",
    )
    ap.add_argument("--batch-size", type=int, default=None, help="default: the recipe's (16)")
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--preset", default="mini", help="model size (tiny, mini, small, ...)")
    ap.add_argument(
        "--layers", type=int, default=2, help="override the preset's number of layers (default 2)"
    )
    ap.add_argument(
        "--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3; 2-layer model, checked)"
    )
    ap.add_argument(
        "--finetune-examples",
        type=int,
        default=None,
        help="training examples per task (default: CoNLL 4000, SST-2 2000)",
    )
    ap.add_argument(
        "--finetune-lr", type=float, default=None, help="default: per task (CoNLL 1e-3, SST-2 1e-4)"
    )
    ap.add_argument("--no-finetune", action="store_true", help="skip step 5")
    ap.add_argument(
        "--transfer-model",
        default=None,
        help="the model step 5 fine-tunes: 'committed' (models/bertkit-electra-modernbert-mini, 3 seeds on STS-B), 'demo' "
        "(the model step 3 trained, on CoNLL and SST-2), or a model directory (default: committed when present)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import shutil

    tasks_dirs = [f"{t.path.split('/')[-1].lower()}-{m}" for t in (*TRANSFER_TASKS, *COMMITTED_TRANSFER_TASKS)
                  for m in ("pretrained", "random")]  # fmt: skip
    for d in ("run", "random-model", *tasks_dirs, *(f"{d}-{s}" for d in tasks_dirs for s in COMMITTED_SEEDS)):
        shutil.rmtree(out / d, ignore_errors=True)  # the demo always trains afresh
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    shared = shared_data()

    print(f"[1/5] corpus -> {out}", flush=True)
    if args.corpus:
        corpus = list(args.corpus)
        corpus_info = {"source": "user", "paths": corpus}
        probes = corpus_probes(corpus)
    elif shared is not None:
        corpus = [str(shared / "corpus" / "gutenberg"), str(shared / "corpus" / "wikitext-2" / "valid.txt")]
        corpus_info = {"source": "shared corpora (Gutenberg books + WikiText-2 valid)", "paths": corpus}
        probes = corpus_probes(corpus)
    else:
        cfile = out / "corpus" / "python-docs.txt"
        corpus_info = python_docs_corpus(cfile)
        corpus = [str(cfile)]
        probes = list(DEFAULT_PROBES)
    print(f"      {json.dumps({k: v for k, v in corpus_info.items() if k != 'paths'})}", flush=True)
    timings["corpus_s"] = round(time.perf_counter() - t_start, 2)

    print("[2/5] WordPiece vocabulary and token shards", flush=True)
    data_dir, data_info = build_data(
        corpus, out, args.vocab_size, args.max_seq_length, progress=not args.quiet
    )
    timings.update(vocab_s=data_info["vocab_s"], prepare_s=data_info["prepare_s"])
    print(f"      vocab {data_info['vocab'].get('vocab_size', '?')} tokens; data in {data_dir}", flush=True)

    from bertkit.pretrain import PretrainConfig, pretrain

    # short from-scratch training: dropout only slows it down (Cramming); the random baseline shares the config
    overrides = {
        "max_position_embeddings": max(128, args.max_seq_length),
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }
    if args.layers:
        overrides["num_hidden_layers"] = args.layers
    recipe = PretrainConfig(preset=args.preset, lr=args.lr, batch_size=args.batch_size).with_recipe()
    if args.steps is None:
        per_step = time_one_step(
            data_dir, args.preset, overrides, recipe.batch_size, args.max_seq_length, recipe.lr
        )
        args.steps = int(min(6000, max(200, args.train_seconds / per_step)))
        print(
            f"      {per_step * 1000:.0f} ms per step here: {args.steps} steps fit in ~{args.train_seconds:.0f} s"
        )
    log_every = max(args.steps // 40, 1)
    # hold out ~10% of the documents (at most 50): enough masked tokens for a fill-mask score that means something
    n_docs = int(json.loads((data_dir / "manifest.json").read_text())["documents"])
    valid_documents = min(50, max(1, n_docs // 10))
    cfg = PretrainConfig(
        valid_documents=valid_documents,
        data=str(data_dir),
        out=str(out / "run"),
        preset=args.preset,
        model_overrides=overrides,
        objective="mlm+nsp",
        steps=args.steps,
        batch_size=recipe.batch_size,
        max_seq_length=args.max_seq_length,
        lr=recipe.lr,
        warmup=recipe.warmup,
        masked_lm_prob=recipe.masked_lm_prob,
        seed=args.seed,
        log_every=log_every,
        checkpoint_every=max(args.steps // 3, 1),
        eval_every=max(args.steps // 4, 1),
        eval_batches=8,
        progress=not args.quiet,
    )
    print(
        f"[3/5] pre-training BERT-{args.preset} ({args.layers or 'preset'} layers, MLM + NSP) for {args.steps} steps of "
        f"{cfg.batch_size} x {args.max_seq_length} tokens ({cfg.masked_lm_prob:.0%} masked), lr {cfg.lr:g} with "
        f"{cfg.warmup:.0%} warm-up, on "
        f"{torch.get_num_threads()} CPU thread(s)",
        flush=True,
    )

    every = 4 * log_every  # a line for every 4th log record (steps that are logged)

    def show(rec: dict) -> None:
        if rec["step"] % every and rec["step"] != args.steps:
            return
        from tqdm import tqdm

        tqdm.write(
            f"      step {rec['step']:5d}  loss {rec['loss']:.3f}  MLM acc {rec.get('masked_lm_accuracy', 0):.3f}"
            f"  NSP acc {rec.get('next_sentence_accuracy', 0):.3f}  {rec.get('tokens_per_s') or 0:.0f} tok/s"
            f"  {rec['elapsed_s']:.0f} s"
        )

    t0 = time.perf_counter()
    res = pretrain(cfg, callbacks=[show])
    timings["pretrain_s"] = round(time.perf_counter() - t0, 2)
    rows = [json.loads(ln) for ln in (out / "run" / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    evals = [json.loads(ln) for ln in (out / "run" / "eval.jsonl").read_text().splitlines() if ln.strip()]
    for e in evals:
        print(
            f"      eval @ {e['step']:5d}: MLM acc {e.get('masked_lm_accuracy', float('nan')):.3f}  "
            f"NSP acc {e.get('next_sentence_accuracy', float('nan')):.3f}  loss {e['loss']:.3f}"
        )

    print("[4/5] did it learn? fill-mask on held-out documents", flush=True)
    from bertkit.heads.pretraining import BertForMaskedLM, fill_mask
    from bertkit.tokenizer import Tokenizer
    from lab.mlm_eval import heldout_mlm

    model_dir = Path(res["model_dir"])
    t0 = time.perf_counter()
    held = heldout_mlm(model_dir, data_dir, args.max_seq_length, valid_documents)
    timings["heldout_s"] = round(time.perf_counter() - t0, 2)
    learned = held["mlm_accuracy"] > held["unigram_accuracy"] and held["distinct_predictions"] > 1
    print(
        f"      held-out fill-mask accuracy {100 * held['mlm_accuracy']:.1f}% vs {100 * held['unigram_accuracy']:.1f}% "
        f"for the unigram guess (always the most frequent token) on {held['masked_tokens']} masked tokens; "
        f"{held['distinct_predictions']} distinct tokens predicted; perplexity {held['mlm_perplexity']:.0f}"
        f" -> {'it learned more than word frequencies' if learned else 'NOT better than the unigram guess'}",
        flush=True,
    )
    print(
        f"      held-out loss {held['mlm_loss']:.3f} vs {held['unigram_loss']:.3f} for word frequencies alone; "
        f"{held['shuffled_mlm_loss']:.3f} on the same text shuffled: word order is worth "
        f"{held['word_order_gain']:.3f} nats to it (0: it reads its context as a bag of words)",
        flush=True,
    )
    if held["word_order_gain"] < WORD_ORDER_GAIN_TO_TRANSFER:
        print(f"      note: {BAG_OF_WORDS_NOTE.format(steps=args.steps)}", flush=True)
    mlm = BertForMaskedLM.from_pretrained(model_dir)
    tok = Tokenizer.from_pretrained(model_dir)
    predictions = []
    for text in probes:
        preds = fill_mask(mlm, tok, text, top_k=5)
        if not preds:
            continue
        tops = ", ".join(f"{p['token']} ({p['score']:.2f})" for p in preds[0])
        print(f"      {text}\n        -> {tops}")
        predictions.append({"text": text, "predictions": preds[0]})

    transferred: dict | str
    source = None
    if args.no_finetune:
        transferred = "skipped (--no-finetune)"
        print(f"[5/5] {transferred}", flush=True)
    else:
        source, tasks, seeds = transfer_plan(args.transfer_model, model_dir)
        print(f"[5/5] does it transfer? {source} next to the same model from random init", flush=True)
        t0 = time.perf_counter()
        rnd = random_model(out / "random-model", source, args.seed)
        transferred = transfer(source, rnd, shared, out, args, tasks=tasks, seeds=seeds)
        timings["finetune_s"] = round(time.perf_counter() - t0, 2)
        for name, r in transferred.items():
            if isinstance(r, dict) and len(r["seeds"]) > 1:
                verdict = "beyond" if r["beyond_spread"] else "NOT beyond"
                print(f"      {name}: pre-trained {min(r['pretrained_scores']):.1f}..{max(r['pretrained_scores']):.1f}"
                      f" vs random init {min(r['random_scores']):.1f}..{max(r['random_scores']):.1f} over seeds "
                      f"{r['seeds']}: {verdict} the seeds' spread", flush=True)  # fmt: skip

    timings["total_s"] = round(time.perf_counter() - t_start, 2)
    first, last = rows[0], rows[-1]
    report = {
        "corpus": corpus_info,
        "data": data_info,
        "model": {"preset": args.preset, **overrides, "dir": str(model_dir)},
        "train": {
            "steps": args.steps,
            "batch_size": cfg.batch_size,
            "max_seq_length": args.max_seq_length,
            "lr": cfg.lr,
            "warmup": cfg.warmup,
            "first": first,
            "last": last,
        },
        "eval": evals,
        "heldout": held,
        "learned_beyond_unigram": learned,
        "transfer": transferred,
        "transfer_model": str(source) if source is not None else None,
        "fill_mask": predictions,
        "timings": timings,
        "files": {
            "metrics": str(out / "run" / "metrics.jsonl"),
            "curves_png": str(out / "run" / "curves.png"),
        },
    }
    atomic_write_json(out / "report.json", report)
    try:
        shutil.copyfile(out / "run" / "curves.png", out / "curves.png")
    except OSError:
        pass
    transfer_line = "".join(
        f"; {name} {r['pretrained']:.1f} pre-trained vs {r['random init']:.1f} random init"
        for name, r in (transferred.items() if isinstance(transferred, dict) else ()) if isinstance(r, dict)
    )  # fmt: skip
    if held["word_order_gain"] < WORD_ORDER_GAIN_TO_TRANSFER and source == model_dir:
        transfer_line += " (the model still reads a bag of words: see the note under [4/5])"
    print(
        f"done in {timings['total_s']:.0f} s: held-out fill-mask {100 * held['mlm_accuracy']:.1f}% "
        f"(unigram {100 * held['unigram_accuracy']:.1f}%){transfer_line}; report {out / 'report.json'}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
