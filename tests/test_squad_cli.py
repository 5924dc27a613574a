"""End-to-end `finetune squad` on tiny real subsets with the MiniLM weights (a few seconds on CPU)."""

from __future__ import annotations

import argparse
import json

import pytest

from bertkit.cli.squad import add_arguments
from bertkit.errors import UserError
from bertkit.tasks import squad_train


def parse(argv: list[str]) -> argparse.Namespace:
    # The common options normally come from `bertkit finetune`; built here to test stand-alone.
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=float)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--max-seq-length", type=int)
    parser.add_argument("--seed", type=int, default=0)
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.quiet = True
    return args


def tiny_subset(src, dst, articles: int, questions: int) -> dict:
    """First paragraph of each of the first ``articles`` articles, ``questions`` questions each."""
    data = json.loads(src.read_text(encoding="utf-8"))
    data["data"] = [
        {
            "title": a["title"],
            "paragraphs": [{**a["paragraphs"][0], "qas": a["paragraphs"][0]["qas"][:questions]}],
        }
        for a in data["data"][:articles]
    ]
    dst.write_text(json.dumps(data), encoding="utf-8")
    return data


@pytest.fixture(scope="module")
def small_qa_model(minilm_dir, tmp_path_factory):
    """The first 2 layers of MiniLM (real pretrained weights, 3x faster) saved with its tokenizer."""
    from bertkit.heads.finetune import BertForQuestionAnswering
    from bertkit.tokenizer import Tokenizer

    path = tmp_path_factory.mktemp("minilm2") / "model"
    BertForQuestionAnswering.from_pretrained(minilm_dir, num_hidden_layers=2).save_pretrained(path)
    Tokenizer.from_pretrained(minilm_dir).save_pretrained(path)
    return path


def test_defaults_and_article_split():
    args = parse(["--model", "m", "--out", "o", "--train", "t.json", "--dev-articles", "2"])
    assert args.max_seq_length is None and args.doc_stride == 128 and args.max_query_length == 64
    assert args.n_best_size == 20 and args.max_answer_length == 30 and args.null_score_diff_threshold == 0.0
    data = {"version": "1.1", "data": [{"title": str(i), "paragraphs": []} for i in range(10)]}
    train, dev = squad_train.split_articles(data, 2, 5)
    assert [a["title"] for a in dev["data"]] == ["8", "9"]
    assert [a["title"] for a in train["data"]] == ["0", "1", "2", "3", "4"]
    with pytest.raises(UserError, match="--dev-articles 10"):
        squad_train.split_articles(data, 10, None)


def test_bad_requests_are_clear_errors(tmp_path, minilm_dir):
    base = ["--model", str(minilm_dir), "--out", str(tmp_path), "--train", str(tmp_path / "x.json")]
    with pytest.raises(UserError, match="--dev-articles"):
        squad_train.run(parse(base))
    with pytest.raises(UserError, match="no room for the context"):
        squad_train.run(
            parse([*base, "--dev-articles", "1", "--max-seq-length", "40", "--max-query-length", "40"])
        )
    with pytest.raises(UserError, match="--doc-stride 0"):
        squad_train.run(parse([*base, "--dev-articles", "1", "--doc-stride", "0"]))
    with pytest.raises(UserError, match="x.json: SQuAD file not found"):
        squad_train.run(parse([*base, "--dev-articles", "1"]))
    (tmp_path / "x.json").write_text('{"version": "1.1", "data": [{"title": "a", "paragraphs": []}]}')
    with pytest.raises(UserError, match="the file has 1 articles"):
        squad_train.run(parse([*base, "--dev-articles", "1"]))


def test_tiny_v11_end_to_end_learns(shared_data, small_qa_model, tmp_path):
    data = tiny_subset(
        shared_data / "squad" / "dev-v1.1.json", tmp_path / "tiny.json", articles=4, questions=1
    )
    out = tmp_path / "out"
    # train and evaluate on the same 4 questions (4 contexts): a working pipeline (targets, windows,
    # n-best, final text) memorises them; an off-by-one anywhere would not score
    args = parse(
        ["--model", str(small_qa_model), "--out", str(out), "--train", str(tmp_path / "tiny.json"), "--dev", str(tmp_path / "tiny.json"),
         "--max-seq-length", "128", "--doc-stride", "64", "--batch-size", "4", "--epochs", "10", "--lr", "5e-4"]
    )  # fmt: skip
    res = squad_train.run(args)
    assert res["task"] == "squad-v1.1" and res["split"] == "dev" and res["examples"] == 4
    assert set(res["metrics"]) >= {"exact_match", "f1"}
    assert res["final_loss"] < res["first_loss"]
    assert res["metrics"]["f1"] >= 75.0, res["metrics"]
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(res))
    preds = json.loads((out / "predictions.json").read_text())
    qids = [q["id"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert sorted(preds) == sorted(qids)
    assert (out / "nbest_predictions.json").is_file() and not (out / "null_odds.json").exists()
    assert (out / "loss.png").is_file()
    card = (out / "model" / "README.md").read_text()
    assert "pipeline_tag: question-answering" in card and f"| f1 | {res['metrics']['f1']:.4g} |" in card
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, res["steps"] + 1))  # the generic Trainer's per-step log
    # the saved model dir (weights + tokenizer) reloads and reproduces predictions.json
    from bertkit.heads.finetune import BertForQuestionAnswering
    from bertkit.tasks import squad as S
    from bertkit.tasks import squad_postprocess as P
    from bertkit.tokenizer import Tokenizer

    model = BertForQuestionAnswering.from_pretrained(out / "model").eval()
    tok = Tokenizer.from_pretrained(out / "model")
    examples, _ = S.read_squad_examples(data, is_training=False)
    feats = S.convert_examples_to_features(examples, tok, max_seq_length=128, doc_stride=64)
    raw = squad_train.predict_logits(model, feats, progress=False)
    assert P.compute_predictions(examples, feats, raw).predictions == preds


def test_tiny_v2_split_by_article(shared_data, small_qa_model, tmp_path, capsys):
    tiny_subset(
        shared_data / "squad" / "dev-v2.0-half.json", tmp_path / "tiny2.json", articles=3, questions=4
    )
    out = tmp_path / "out2"
    # through the real command line: `bertkit finetune squad ...` prints the metrics.json object
    from bertkit.cli import main

    argv = ["finetune", "squad", "--model", str(small_qa_model), "--out", str(out), "--train", str(tmp_path / "tiny2.json"),
            "--version", "2.0", "--dev-articles", "1", "--max-seq-length", "128", "--batch-size", "4", "--epochs", "1", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    res = json.loads((out / "metrics.json").read_text())
    assert printed == res
    m = res["metrics"]
    assert res["task"] == "squad-v2.0" and res["examples"] == 4 and res["train_examples"] == 8
    assert {"exact", "f1", "total", "best_f1", "best_f1_thresh", "best_exact", "best_exact_thresh"} <= set(m)
    assert m["total"] == 4 and m.get("HasAns_total", 0) + m.get("NoAns_total", 0) == 4
    odds = json.loads((out / "null_odds.json").read_text())
    preds = json.loads((out / "predictions.json").read_text())
    assert sorted(odds) == sorted(preds) and len(preds) == 4
    dev = json.loads((out / "dev.json").read_text())  # the split-off dev set, for the official script
    # the threshold is searched over each question's best non-null answer (first non-empty n-best text)
    from bertkit.tasks.squad_metrics import evaluate

    nbest = json.loads((out / "nbest_predictions.json").read_text())
    best_non_null = {q: next(c["text"] for c in v if c["text"]) for q, v in nbest.items()}
    search = evaluate(dev, best_non_null, version="2.0", na_probs=odds)
    assert res["tuned"]["null_score_diff_threshold"] == search["best_f1_thresh"]
    assert res["tuned"]["metrics"]["f1"] == pytest.approx(search["best_f1"])
    assert res["tuned"]["metrics"]["f1"] >= m["f1"] - 1e-9  # the default threshold is one of the candidates
    assert len(dev["data"]) == 1 and sorted(
        q["id"] for p in dev["data"][0]["paragraphs"] for q in p["qas"]
    ) == sorted(preds)
