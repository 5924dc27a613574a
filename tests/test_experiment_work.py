"""The matrix ETA's work estimate from a task's data (`lab.experiment.work`): it counts the reader's own
examples and SQuAD windows, follows the data's size, limits and a frozen encoder, and the runner uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_experiment import MINIMAL

from lab.experiment import load_matrix, run_matrix
from lab.experiment import work as W

# test_experiment's two-model matrix (SST-2 on a rate grid) with SQuAD, NER and feature-based tasks beside it
MATRIX = (
    MINIMAL.replace("lr = [1e-4, 3e-4]\n", "lr = [1e-4, 3e-4]\nepochs = 3\n")
    + """
[[task]]
name = "QA"
kind = "squad"
file = "qa.json"
dev_articles = 1
lr = 1e-4
epochs = 2
max_seq_length = 32
doc_stride = 8
max_query_length = 6
[[task]]
name = "NER"
kind = "ner"
lr = 1e-4
[[features]]
model = "a"
task = "NER"
hidden_size = 16
variants = [
  { name = "last", layers = [-1] },
  { name = "two-side-by-side", layers = [-1, -2] },
  { name = "two-summed", layers = [-1, -2], combine = "weighted_sum" },
]
"""
)

WORDS = "the cat sat on a mat and then ran to its home by way of an old red barn far out west".split()


def _sentence(n: int, shift: int = 0) -> str:
    return " ".join(WORDS[(shift + k) % len(WORDS)] for k in range(n))


def _qa(context_words: int, questions: int) -> dict:
    context = _sentence(context_words)
    qas = [{"id": f"q{context_words}-{i}", "question": _sentence(3 + i, shift=i),
            "answers": [{"text": "cat", "answer_start": context.index("cat")}]} for i in range(questions)]  # fmt: skip
    return {"title": f"t{context_words}", "paragraphs": [{"context": context, "qas": qas}]}


def _data(root: Path, sentences: int = 4, context_words: int = 60) -> None:
    sst = root / "glue" / "SST-2"
    sst.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{_sentence(5 + i, i)}\t{i % 2}\n" for i in range(sentences))
    (sst / "train.tsv").write_text("sentence\tlabel\n" + rows)
    (sst / "dev.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{_sentence(4, i)}\t{i % 2}\n" for i in range(3))
    )
    articles = [_qa(context_words, 3), _qa(12, 2)]  # the last article is dev
    (root / "qa.json").write_text(json.dumps({"version": "1.1", "data": articles}))
    conll = root / "conll2003"
    conll.mkdir(exist_ok=True)
    sentence = "".join(f"{w} NN O O\n" for w in WORDS[:6]) + "\n"
    for name in ("train", "valid"):
        (conll / f"{name}.txt").write_text("-DOCSTART- -X- -X- O\n\n" + sentence * 3)


def _matrix(tmp_path: Path, text: str = MATRIX):
    (tmp_path / "m.toml").write_text(text)
    return load_matrix(tmp_path / "m.toml")


def test_squad_windows_are_the_readers_features_when_each_word_is_one_token(tmp_path, monkeypatch):
    """With a vocabulary of whole words (one token each), the estimate's windows are exactly the features the
    SQuAD reader makes (its doc stride and query cap), and so are their lengths."""
    from bertkit.tasks import squad as S
    from bertkit.tokenizer import Tokenizer

    _data(tmp_path, context_words=60)
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
    )
    tok = Tokenizer(str(tmp_path / "vocab.txt"), lowercase=True)
    monkeypatch.setattr(W, "TOKENS_PER_WORD", 1.0)
    m = _matrix(tmp_path)
    train, dev = W.task_lengths(m, m.cell("finetune/a/QA/seed1").spec["task"])
    data = json.loads((tmp_path / "qa.json").read_text())
    for part, got in (([data["data"][0]], train), ([data["data"][1]], dev)):
        examples, _ = S.read_squad_examples({"data": part}, is_training=False)
        feats = S.convert_examples_to_features(
            examples, tok, max_seq_length=32, doc_stride=8, max_query_length=6
        )
        assert sorted(got.tolist()) == sorted(float(len(f.input_ids)) for f in feats)
    assert len(train) > 3 * 2  # the long context is cut into several windows a question


def _work(tmp_path: Path, cell: str, text: str = MATRIX) -> float:
    m = _matrix(tmp_path, text)
    return W.cell_work(m, m.cell(cell))


def test_work_follows_the_data_its_limits_and_a_frozen_encoder(tmp_path):
    sst = "finetune/a/SST-2/seed2"  # seed 1 reuses its grid's run (below)
    _data(tmp_path, sentences=4)
    base = _work(tmp_path, sst)
    assert base is not None and base != _matrix(tmp_path).cell(sst).cost  # not the plan's 5,000 examples
    dev_only = _work(tmp_path, sst, MATRIX.replace("epochs = 3", "epochs = 0", 1))
    _data(tmp_path, sentences=8)  # the first four sentences again, then four longer ones
    more = _work(tmp_path, sst)
    assert more - dev_only > 2 * (base - dev_only)  # twice the sentences, and longer ones: more than twice
    limited = _work(tmp_path, sst, MATRIX.replace("epochs = 3", "epochs = 3\nmax_train_examples = 4", 1))
    assert limited == pytest.approx(base)  # the first four, as before
    frozen = _work(tmp_path, sst, MATRIX.replace("epochs = 3", "epochs = 3\nfreeze_encoder = true", 1))
    assert frozen - dev_only == pytest.approx((more - dev_only) / 3)  # forward only through the encoder
    _data(tmp_path, context_words=40)  # a longer SQuAD context: more windows, more work
    short = _work(tmp_path, "finetune/a/QA/seed1")
    _data(tmp_path, context_words=120)
    assert _work(tmp_path, "finetune/a/QA/seed1") > 2 * short


def test_a_feature_cell_adds_a_bilstm_as_wide_as_the_layers_it_reads_side_by_side(tmp_path):
    _data(tmp_path)
    m = _matrix(tmp_path)
    last, side, summed = (
        W.cell_work(m, m.cell(f"features/a/{v}/seed1")) for v in ("last", "two-side-by-side", "two-summed")
    )
    assert summed == pytest.approx(last) and side > last  # a weighted sum is one layer wide
    # the BiLSTM's input grows by one hidden size (128, tiny): 3 passes x 2 directions x 4 gates x 2 FLOPs
    tokens = sum(min(64.0, 1.3 * 6 + 2) for _ in range(3))
    assert side - last == pytest.approx(3 * 2 * 4 * 2 * 128 * 16 * tokens * 4)


def test_without_data_the_plans_estimate_stands(tmp_path):
    m = _matrix(tmp_path)  # no files written
    assert W.cell_work(m, m.cell("finetune/a/SST-2/seed2")) is None
    assert W.cell_work(m, m.cell("pretrain/a")) is None
    assert W.data_costs(m) == {}


def test_the_runner_prices_cells_by_their_data_and_guesses_from_the_cores_speed(tmp_path, monkeypatch):
    """The result files keep the data's estimate as their cost, so later sittings' rates are per counted FLOP;
    before any cell is timed, the ETA runs at the speed measured on a core."""
    from lab.experiment import cells as experiment_cells
    from lab.experiment.runner import _seconds_left

    def fake(matrix, cell, out, done, info, progress=True):
        return {"primary": 50.0, "seed": cell.spec.get("seed"), "wall_s": 1.0}

    monkeypatch.setattr(experiment_cells, "run_cell", fake)
    _data(tmp_path)
    m = _matrix(tmp_path)
    run_matrix(tmp_path / "m.toml", out=tmp_path / "out", results=tmp_path / "res", progress=False)
    for name in ("finetune/a/SST-2/seed2", "finetune/a/SST-2/lr0.0003/seed1", "finetune/a/QA/seed1"):
        result = json.loads((tmp_path / "res" / m.cell(name).result_name).read_text())
        assert result["cost"] == pytest.approx(W.cell_work(m, m.cell(name))) and result["cost"] > 0
    # the grid's first seed reuses the run of its picked rate: no work, as the plan says (not counted twice)
    assert (
        json.loads((tmp_path / "res" / m.cell("finetune/a/SST-2/seed1").result_name).read_text())["cost"] == 0
    )
    cell = m.cell("finetune/a/SST-2/seed2")
    assert _seconds_left([cell], [], {}, first_guess=2e9) == pytest.approx(cell.cost / 2e9)
