"""make run's step 5 ("does it transfer?"): each small real task fine-tunes the pre-trained model and its
random twin alike, and a task whose data is absent is skipped with the reason."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lab.demo import COMMITTED_MODEL, TRANSFER_TASKS, random_model, transfer, transfer_plan

SENTENCES = [
    [("Alice", "B-PER"), ("visited", "O"), ("Paris", "B-LOC"), (".", "O")],
    [("The", "O"), ("module", "O"), ("returns", "O"), ("a", "O"), ("list", "O")],
    [("Bob", "B-PER"), ("left", "O"), ("London", "B-LOC")],
]


def _conll(path: Path, repeat: int) -> None:
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(repeat):
        for sentence in SENTENCES:
            lines += [f"{word} NN O {tag}" for word, tag in sentence] + [""]
    path.write_text("\n".join(lines) + "\n")


def _args(**kw) -> argparse.Namespace:
    base = {"finetune_lr": None, "finetune_examples": None, "max_seq_length": 32, "seed": 0, "quiet": True}
    return argparse.Namespace(**(base | kw))


def test_each_task_scores_both_models_alike_and_a_missing_task_says_why(tiny_model, tmp_path):
    shared = tmp_path / "data"
    (shared / "conll2003").mkdir(parents=True)
    _conll(shared / "conll2003" / "train.txt", repeat=4)
    _conll(shared / "conll2003" / "valid.txt", repeat=1)
    twin = random_model(tmp_path / "twin", tiny_model, seed=1)
    res = transfer(tiny_model, twin, shared, tmp_path / "out", _args())
    assert [t.name for t in TRANSFER_TASKS] == list(res)  # NER first, then SST-2
    conll = res["CoNLL-2003"]
    assert conll["metric"] == "f1" and conll["train_examples"] == 12
    assert 0 <= conll["pretrained"] <= 100 and 0 <= conll["random init"] <= 100
    assert res["SST-2"] == "skipped: ../shared/data/glue/SST-2 not found"
    # the same weights on both sides score the same: both sides fine-tune with the same settings and seed
    same = transfer(tiny_model, tiny_model, shared, tmp_path / "same", _args(), tasks=TRANSFER_TASKS[:1])
    assert same["CoNLL-2003"]["pretrained"] == same["CoNLL-2003"]["random init"]
    # --finetune-examples caps every task
    fewer = transfer(
        tiny_model, twin, shared, tmp_path / "few", _args(finetune_examples=5), TRANSFER_TASKS[:1]
    )
    assert fewer["CoNLL-2003"]["train_examples"] == 5


def test_no_shared_data_skips_every_task(tiny_model, tmp_path):
    res = transfer(tiny_model, tiny_model, None, tmp_path, _args())
    assert all(isinstance(v, str) and v.startswith("skipped: ") for v in res.values()) and len(res) == 2


def test_make_run_end_to_end_on_a_small_corpus_says_when_the_model_still_reads_a_bag_of_words(
    tmp_path, capsys
):
    """The demo's whole path (vocabulary, shards, pre-training, held-out fill-mask vs unigram, fill-mask
    samples) on a small corpus: 30 steps leave the model reading a bag of words, which it says in place of
    a transfer verdict."""
    import json

    from lab.demo import WORD_ORDER_GAIN_TO_TRANSFER, main, python_docs_corpus

    corpus = tmp_path / "corpus.txt"
    python_docs_corpus(corpus, max_bytes=200_000)
    out = tmp_path / "demo"
    argv = ["--corpus", str(corpus), "--out", str(out), "--steps", "30", "--preset", "tiny", "--vocab-size",
            "800", "--no-finetune", "--quiet", "--threads", "1"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["train"]["steps"] == 30 and report["transfer"] == "skipped (--no-finetune)"
    assert report["heldout"]["word_order_gain"] < WORD_ORDER_GAIN_TO_TRANSFER
    printed = capsys.readouterr().out
    assert "after 30 steps the model has not learned word order yet" in printed
    assert "run again with --steps 5000" in printed


def test_with_several_seeds_each_side_runs_every_seed_and_the_verdict_compares_worst_with_best(
    tiny_model, tmp_path
):
    shared = tmp_path / "data"
    (shared / "conll2003").mkdir(parents=True)
    _conll(shared / "conll2003" / "train.txt", repeat=4)
    _conll(shared / "conll2003" / "valid.txt", repeat=1)
    twin = random_model(tmp_path / "twin", tiny_model, seed=1)
    res = transfer(tiny_model, twin, shared, tmp_path / "out", _args(), TRANSFER_TASKS[:1], seeds=(0, 1, 2))
    r = res["CoNLL-2003"]
    assert r["seeds"] == [0, 1, 2] and len(r["pretrained_scores"]) == len(r["random_scores"]) == 3
    assert r["pretrained"] == round(sum(r["pretrained_scores"]) / 3, 2)
    assert r["beyond_spread"] == (min(r["pretrained_scores"]) > max(r["random_scores"]))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"conll2003-{side}-{s}" for side in ("pretrained", "random") for s in (0, 1, 2)
    ]
    # the same weights on both sides never count as beyond the spread
    same = transfer(
        tiny_model, tiny_model, shared, tmp_path / "same", _args(), TRANSFER_TASKS[:1], seeds=(0, 1)
    )
    assert same["CoNLL-2003"]["beyond_spread"] is False


def test_step_5_fine_tunes_the_committed_model_when_there_else_the_demos_own(tmp_path, monkeypatch):
    import lab.demo as demo

    demo_model = tmp_path / "demo-model"
    if (COMMITTED_MODEL / "config.json").is_file():
        path, tasks, seeds = transfer_plan(None, demo_model)
        assert path == COMMITTED_MODEL and seeds == demo.COMMITTED_SEEDS and len(seeds) >= 3
        assert tasks == demo.COMMITTED_TRANSFER_TASKS
    assert transfer_plan("demo", demo_model) == (demo_model, TRANSFER_TASKS, None)
    monkeypatch.setattr(demo, "COMMITTED_MODEL", tmp_path / "absent")
    assert transfer_plan(None, demo_model)[0] == demo_model  # nothing committed: the demo's own model
    with pytest.raises(SystemExit, match="has no config.json"):
        transfer_plan(str(tmp_path / "nowhere"), demo_model)
