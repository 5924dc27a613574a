"""Every GLUE task end to end on files in the exact GLUE layouts (columns, headers, test files without labels)
with the real files' quirks (a byte-order mark, a quoted field holding a tab, QQP rows with missing columns,
CoLA without a header), through `bertkit finetune glue --predict-test` to the leaderboard's submission files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from bertkit.cli import main
from bertkit.tasks.glue import TASKS, read_glue

WORDS = "the a good bad film plot cast great poor fine dull story man dog runs sits".split()

MNLI_TRAIN = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
              "sentence2_parse sentence1 sentence2 label1 gold_label").split()  # fmt: skip
MNLI_DEV = MNLI_TRAIN[:10] + ["label1", "label2", "label3", "label4", "label5", "gold_label"]
MNLI_TEST = MNLI_TRAIN[:10]
STSB = "index genre filename year old_index source1 source2 sentence1 sentence2 score".split()


def _sent(i: int, n: int = 5) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n))


def _tsv(path: Path, header, rows, bom: bool = False) -> None:
    text = ("\ufeff" if bom else "") + "".join(
        "\t".join(map(str, r)) + "\n" for r in ([header] if header else []) + rows
    )
    path.write_text(text, encoding="utf-8")


def _labels(task: str, i: int):
    t = TASKS[task]
    return f"{(i % 5) * 1.0 + 0.2:.1f}" if t.labels is None else t.labels[i % len(t.labels)]


def make_glue(root: Path, n: int = 12) -> dict[str, Path]:
    """Each task's folder under ``root``, GLUE's file names and columns; returns {task: folder}."""
    dirs = {}
    for task in TASKS:
        d = root / task
        d.mkdir(parents=True)
        dirs[task] = d
    for split, k in (("train", n), ("dev", 8)):
        ex = [(i, _sent(i), _sent(i + 3), _labels("SST-2", i)) for i in range(k)]
        _tsv(
            dirs["CoLA"] / f"{split}.tsv",
            None,
            [("gj04", _labels("CoLA", i), "*" if i % 2 else "", a) for i, a, _, _ in ex],
        )
        _tsv(dirs["SST-2"] / f"{split}.tsv", ["sentence", "label"], [(a, y) for _, a, _, y in ex])
        _tsv(dirs["MRPC"] / f"{split}.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
             [(_labels("MRPC", i), 100 + i, 200 + i, a, b) for i, a, b, _ in ex], bom=True)  # fmt: skip
        _tsv(dirs["STS-B"] / f"{split}.tsv", STSB,
             [(i, "main-news", "2012", "0001", i, "none", "none", a, b, _labels("STS-B", i)) for i, a, b, _ in ex])  # fmt: skip
        qqp = [(i, 2 * i, 2 * i + 1, a + "?", b + "?", _labels("QQP", i)) for i, a, b, _ in ex]
        qqp.insert(3, (999, 1998, 1999, "a question broken over"))  # a row with missing columns (skipped)
        _tsv(
            dirs["QQP"] / f"{split}.tsv",
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            qqp,
        )
        for task, cols in (("QNLI", ["question", "sentence"]), ("RTE", ["sentence1", "sentence2"]),
                           ("WNLI", ["sentence1", "sentence2"])):  # fmt: skip
            _tsv(
                dirs[task] / f"{split}.tsv",
                ["index", *cols, "label"],
                [(i, a, b, _labels(task, i)) for i, a, b, _ in ex],
            )
        for name in ("train",) if split == "train" else ("dev_matched", "dev_mismatched"):
            header = MNLI_TRAIN if split == "train" else MNLI_DEV
            rows = []
            for i, a, b, _ in ex:
                y = _labels("MNLI", i)
                parse = f"( ( {a} ) )"
                if (
                    i == 1
                ):  # a quoted parse holding a tab: one field in the real file, two if quotes are ignored
                    parse = f'"( ( {a} )\t)"'
                votes = [y] if split == "train" else [y] * 5
                rows.append(
                    (
                        i,
                        31000 + i,
                        f"{31000 + i}n",
                        "fiction",
                        parse,
                        f"( {b} )",
                        parse,
                        f"(ROOT {b})",
                        a,
                        b,
                        *votes,
                        y,
                    )
                )
            _tsv(dirs["MNLI"] / f"{name}.tsv", header, rows)
    tests = [(i, _sent(i + 1), _sent(i + 5)) for i in range(5)]
    _tsv(dirs["CoLA"] / "test.tsv", ["index", "sentence"], [(i, a) for i, a, _ in tests])
    _tsv(dirs["SST-2"] / "test.tsv", ["index", "sentence"], [(i, a) for i, a, _ in tests])
    _tsv(dirs["MRPC"] / "test.tsv", ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
         [(i, 300 + i, 400 + i, a, b) for i, a, b in tests], bom=True)  # fmt: skip
    _tsv(
        dirs["STS-B"] / "test.tsv",
        STSB[:-1],
        [(i, "main-forums", "2015", "0002", i, "none", "none", a, b) for i, a, b in tests],
    )
    _tsv(dirs["QQP"] / "test.tsv", ["id", "question1", "question2"], [(i + 50, a, b) for i, a, b in tests])
    for task, cols in (("QNLI", ["question", "sentence"]), ("RTE", ["sentence1", "sentence2"]),
                       ("WNLI", ["sentence1", "sentence2"])):  # fmt: skip
        _tsv(dirs[task] / "test.tsv", ["index", *cols], [(i, a, b) for i, a, b in tests])
    for name in ("test_matched", "test_mismatched"):
        _tsv(dirs["MNLI"] / f"{name}.tsv", MNLI_TEST,
             [(i + 7, 1, f"{i}n", "slate", "()", "()", "()", "()", a, b) for i, a, b in tests])  # fmt: skip
    (root / "diagnostic").mkdir()
    _tsv(
        root / "diagnostic" / "diagnostic.tsv",
        ["index", "sentence1", "sentence2"],
        [(i, a, b) for i, a, b in tests[:4]],
    )
    return dirs


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return make_glue(tmp_path_factory.mktemp("glue"))


def test_readers_handle_the_real_files_quirks(glue):
    mnli = read_glue("MNLI", glue["MNLI"], "train")
    assert len(mnli) == 12 and mnli[1].label == TASKS["MNLI"].labels[1]  # the quoted-tab row kept its columns
    assert mnli[1].text_a == _sent(1) and mnli[1].text_b == _sent(4)
    assert len(read_glue("MNLI", glue["MNLI"], "dev_mm")) == 8
    qqp = read_glue("QQP", glue["QQP"], "train")
    assert len(qqp) == 12 and all(e.text_b.endswith("?") for e in qqp)  # the broken row is skipped
    mrpc = read_glue("MRPC", glue["MRPC"], "dev")
    assert mrpc[0].label in ("0", "1") and mrpc[0].text_a == _sent(0)  # header found despite the BOM
    cola = read_glue("CoLA", glue["CoLA"], "train")
    assert [e.label for e in cola[:3]] == ["0", "1", "0"] and cola[0].text_b is None
    test = read_glue("QQP", glue["QQP"], "test")
    assert [e.guid for e in test] == ["50", "51", "52", "53", "54"] and {e.label for e in test} == {None}
    sts = read_glue("STS-B", glue["STS-B"], "test")
    assert sts[2].text_a == _sent(3) and sts[2].text_b == _sent(7)
    # quotes are still literal where the row is not too wide (stray quotes in sentences stay as they are)
    quirky = glue["SST-2"].parent / "SST-2-quotes"
    quirky.mkdir()
    (quirky / "train.tsv").write_text((glue["SST-2"] / "train.tsv").read_text() + '"quoted" start\t1\n')
    assert read_glue("SST-2", quirky, "train")[-1].text_a == '"quoted" start'


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, minilm_dir):
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    path = tmp_path_factory.mktemp("tiny") / "model"
    tok = Tokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    BertModel(BertConfig.preset("tiny", vocab_size=len(tok), max_position_embeddings=64)).save_pretrained(
        path
    )
    tok.save_pretrained(path)
    return path


SUBMISSIONS = {"MNLI": ["MNLI-m", "MNLI-mm", "AX"]}
MAIN = {"CoLA": "mcc", "MRPC": "f1", "QQP": "f1", "STS-B": "spearman"}


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_end_to_end_with_leaderboard_files(task, glue, tiny_model, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["finetune", "glue", "--task", task, "--data-dir", glue[task], "--model", tiny_model, "--out", out,
            "--max-steps", 2, "--batch-size", 4, "--max-seq-length", 32, "--quiet", "--predict-test"]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["task"] == task and res["steps"] == 2 and res["examples"] == 8
    assert MAIN.get(task, "accuracy") in res["metrics"]
    card = (out / "model" / "README.md").read_text()  # the model card
    assert card.startswith("---\nlibrary_name: bertkit\n") and "pipeline_tag: text-classification" in card
    assert f"Task: **{task}**" in card and "| max_steps | 2 |" in card and "| train examples | 12 |" in card
    main_metric = MAIN.get(task, "accuracy")
    assert f"| {main_metric} | {res['metrics'][main_metric]:.4g} |" in card
    assert f"bertkit finetune glue --task {task} --data-dir {glue[task]}" in card
    if task == "MNLI":
        assert res["dev_mismatched"]["examples"] == 8 and "accuracy" in res["dev_mismatched"]["metrics"]
    t = TASKS[task]
    for name in SUBMISSIONS.get(task, [task]):
        rows = list(csv.reader((out / f"{name}.tsv").open(), delimiter="\t"))
        assert rows[0] == ["index", "prediction"]
        ids = [r[0] for r in rows[1:]]
        if name == "AX":
            assert ids == ["0", "1", "2", "3"]
        elif task == "MNLI":
            assert ids == ["7", "8", "9", "10", "11"]
        else:
            assert ids == ([str(i + 50) for i in range(5)] if task == "QQP" else [str(i) for i in range(5)])
        for _, pred in rows[1:]:
            if t.labels is None:
                assert 0.0 <= float(pred) <= 5.0
            else:
                assert pred in t.labels
        assert res["predicted"][name]["examples"] == len(ids)


def test_predict_test_without_a_test_file_is_a_user_error(glue, tmp_path, capsys):
    d = tmp_path / "RTE"
    d.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (d / name).write_text((glue["RTE"] / name).read_text())
    argv = ["finetune", "glue", "--task", "RTE", "--data-dir", str(d), "--model", str(tmp_path), "--out",
            str(tmp_path / "o"), "--predict-test"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "RTE test file not found" in err and str(d / "test.tsv") in err
    assert not (tmp_path / "o").exists()
