"""End to end on small real subsets with all-MiniLM-L6-v2: the commands learn, write their outputs, and
transformers loads the fine-tuned model with identical logits."""

import json

import pytest
import torch
from children import child_env

from bertkit.cli import main
from bertkit.tasks.glue import read_glue
from bertkit.tasks.ner import read_conll


def _write_conll(path, sentences):
    with open(path, "w") as f:
        f.write("-DOCSTART- -X- -X- O\n\n")
        for s in sentences:
            f.write("".join(f"{w} X X {t}\n" for w, t in zip(s.words, s.tags)) + "\n")


def _run(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _same_logits_in_transformers(model_dir, cls_name, batch):
    transformers = pytest.importorskip("transformers")
    from bertkit.heads import finetune as heads

    ours = getattr(heads, cls_name).from_pretrained(model_dir).eval()
    theirs = getattr(transformers, cls_name).from_pretrained(model_dir).eval()
    with torch.no_grad():
        a, b = ours(**batch).logits, theirs(**batch).logits
    m = batch["attention_mask"].bool()
    if a.dim() == 3:
        a, b = a[m], b[m]
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_classify_learns_sst2_subset(tmp_path, capsys, shared_data, minilm_dir):
    glue = shared_data / "glue" / "SST-2"
    for split, n in (("train", 400), ("dev", 200)):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            for e in read_glue("SST-2", glue, split)[:n]:
                f.write(
                    json.dumps({"sentence": e.text_a, "sentiment": "pos" if e.label == "1" else "neg"}) + "\n"
                )
    out = tmp_path / "out"
    r = _run(
        capsys,
        ["finetune", "classify", "--train", str(tmp_path / "train.jsonl"), "--dev", str(tmp_path / "dev.jsonl"),
         "--text-field", "sentence", "--label-field", "sentiment", "--model", str(minilm_dir), "--out", str(out),
         "--epochs", "2", "--batch-size", "16", "--lr", "1e-4", "--max-seq-length", "64", "--quiet"],
    )  # fmt: skip
    assert r["task"] == "classify" and r["split"] == "dev" and r["examples"] == 200
    assert r["metrics"]["accuracy"] > 0.7, r["metrics"]  # chance is ~0.5
    assert r["final_loss"] < r["first_loss"]
    assert json.loads((out / "metrics.json").read_text()) == r
    for name in (
        "loss.png",
        "predictions.jsonl",
        "model/config.json",
        "model/model.safetensors",
        "model/vocab.txt",
    ):
        assert (out / name).is_file(), name
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "neg", "1": "pos"}

    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(out / "model")
    batch = tok(["a gorgeous , witty film", "dull and lifeless"], max_length=64, return_tensors="pt")
    _same_logits_in_transformers(out / "model", "BertForSequenceClassification", batch)

    # The run's OUT dir stands for OUT/model wherever a model dir is expected.
    pred = _run(capsys, ["predict", str(out), "--input", str(tmp_path / "dev.jsonl"),
                         "--text-field", "sentence", "--out", str(tmp_path / "pred.jsonl")])  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert pred["examples"] == len(rows) == 200
    gold = [json.loads(x)["sentiment"] for x in (tmp_path / "dev.jsonl").read_text().splitlines()]
    assert sum(p["label"] == g for p, g in zip(rows, gold)) / 200 == pytest.approx(r["metrics"]["accuracy"])


def test_ner_learns_conll_subset(tmp_path, capsys, shared_data, minilm_dir):
    train = read_conll(shared_data / "conll2003" / "train.txt")[:400]
    dev = read_conll(shared_data / "conll2003" / "valid.txt")[:150]
    _write_conll(tmp_path / "train.txt", train)
    _write_conll(tmp_path / "dev.txt", dev)
    out = tmp_path / "out"
    r = _run(
        capsys,
        ["finetune", "ner", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "dev.txt"),
         "--test", str(tmp_path / "dev.txt"), "--model", str(minilm_dir), "--out", str(out),
         "--epochs", "2", "--batch-size", "16", "--lr", "1e-4", "--max-seq-length", "64", "--quiet"],
    )  # fmt: skip
    assert r["examples"] == 150
    assert r["final_loss"] < 0.5 * r["first_loss"]
    assert r["metrics"]["f1"] > 0.15, r["metrics"]  # an all-O tagger scores 0
    assert r["test"]["metrics"]["f1"] == pytest.approx(r["metrics"]["f1"])
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 150 and all(len(x["pred"]) == len(x["words"]) for x in rows)

    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(out / "model")
    batch = tok(["EU rejects German call", "Peter Blackburn"], return_tensors="pt")
    _same_logits_in_transformers(out / "model", "BertForTokenClassification", batch)


def test_ner_with_crf_learns_transitions(tmp_path, capsys, shared_data, minilm_dir):
    train = read_conll(shared_data / "conll2003" / "train.txt")[:400]
    _write_conll(tmp_path / "train.txt", train)
    _write_conll(tmp_path / "dev.txt", read_conll(shared_data / "conll2003" / "valid.txt")[:150])
    out = tmp_path / "out"
    r = _run(
        capsys,
        ["finetune", "ner", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "dev.txt"),
         "--model", str(minilm_dir), "--out", str(out), "--crf", "--epochs", "2", "--batch-size", "16",
         "--lr", "1e-4", "--max-seq-length", "64", "--quiet"],
    )  # fmt: skip
    assert r["hyperparameters"]["use_crf"] and r["hyperparameters"]["crf_lr"] == 5e-3
    from bertkit.heads.finetune import BertForTokenClassification

    model = BertForTokenClassification.from_pretrained(out / "model")
    assert model.crf is not None
    # at the encoder's rate (1e-4 for 50 steps) no transition could pass 0.005; the CRF's own rate moves them
    assert float(model.crf.transitions.detach().abs().max()) > 0.02
    assert r["metrics"]["f1"] > 0.15, r["metrics"]  # Viterbi decoding tags entities (all-O scores 0)


def test_feature_based_ner_and_features_command(tmp_path, capsys, shared_data, minilm_dir):
    train = read_conll(shared_data / "conll2003" / "train.txt")[:400]
    dev = read_conll(shared_data / "conll2003" / "valid.txt")[:100]
    _write_conll(tmp_path / "train.txt", train)
    _write_conll(tmp_path / "dev.txt", dev)
    r = _run(
        capsys,
        ["finetune", "ner", "--feature-based", "--train", str(tmp_path / "train.txt"), "--dev",
         str(tmp_path / "dev.txt"), "--model", str(minilm_dir), "--out", str(tmp_path / "fb"), "--epochs", "4",
         "--batch-size", "16", "--lr", "2e-3", "--lstm-hidden", "64", "--max-seq-length", "64", "--quiet"],
    )  # fmt: skip
    assert r["task"].endswith("feature-based") and r["hyperparameters"]["layers"] == [-1, -2, -3, -4]
    assert r["metrics"]["f1"] > 0.2, r["metrics"]

    (tmp_path / "in.txt").write_text("hello world\nthe cat sat ||| on the mat\n")
    f = _run(capsys, ["features", str(minilm_dir), "--input", str(tmp_path / "in.txt"), "--out",
                      str(tmp_path / "f.npz"), "--layers=-1,-2"])  # fmt: skip
    assert f["dim"] == 2 * 384 and f["sequences"] == 2
    import numpy as np

    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    z = np.load(tmp_path / "f.npz")
    assert list(z["tokens"][:4]) == ["[CLS]", "hello", "world", "[SEP]"]
    tok = Tokenizer.from_pretrained(minilm_dir)
    enc = tok(["hello world"], return_tensors="pt")
    with torch.no_grad():
        hs = BertModel.from_pretrained(minilm_dir)(**enc, output_hidden_states=True).hidden_states
    ref = torch.cat([hs[-1], hs[-2]], -1)[0].numpy()
    np.testing.assert_allclose(z["features"][:4], ref, atol=1e-4)


def test_stsb_regression_through_glue_command(tmp_path, capsys, shared_data, minilm_dir):
    src = shared_data / "glue" / "STS-B"
    (tmp_path / "STS-B").mkdir()
    for split, n in (("train", 240), ("dev", 150)):
        lines = (src / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[: n + 1]
        (tmp_path / "STS-B" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = _run(
        capsys,
        ["finetune", "glue", "--task", "sts-b", "--data-dir", str(tmp_path / "STS-B"), "--model", str(minilm_dir),
         "--out", str(tmp_path / "out"), "--epochs", "2", "--batch-size", "8", "--lr", "1e-4",
         "--max-seq-length", "64", "--quiet"],
    )  # fmt: skip
    assert r["task"] == "STS-B" and set(r["metrics"]) == {"pearson", "spearman"}
    assert r["final_loss"] < 0.5 * r["first_loss"], r  # MSE falls from predicting ~0 towards the scores
    assert r["metrics"]["spearman"] > 0.2, r["metrics"]
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "LABEL_0"}


def test_cli_errors(tmp_path, capsys, minilm_dir):
    (tmp_path / "train.csv").write_text("text,label\na,1\n")
    (tmp_path / "dev.csv").write_text("text,label\nb,1\n")
    argv = ["finetune", "classify", "--train", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"),
            "--model", str(minilm_dir), "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2
    assert "only one label" in capsys.readouterr().err
    (tmp_path / "train.csv").write_text("text,label\na,1\nb,0\n")
    (tmp_path / "dev.csv").write_text("txt,label\nb,1\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "dev.csv: column 'text' missing" in err
    for sub in (argv, ["finetune", "squad", "--train", "t.json", "--model", "m", "--out", "o"]):
        with pytest.raises(SystemExit) as bad:  # one shared check for every finetune subcommand
            main([*sub, "--checkpoint-every", "-3"])
        assert bad.value.code == 2 and "--checkpoint-every: -3 must be >= 0" in capsys.readouterr().err


def _tiny_model_dir(path, minilm_dir):
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    BertModel(BertConfig.preset("tiny", vocab_size=len(tok), max_position_embeddings=64)).save_pretrained(
        path
    )
    tok.save_pretrained(path)
    return path


def test_restarts_keep_best_and_freeze_encoder(tmp_path, capsys, minilm_dir):
    from safetensors.torch import load_file

    model = _tiny_model_dir(tmp_path / "tiny", minilm_dir)
    rows = [("good fine great", "1"), ("bad awful poor", "0")] * 24
    for name in ("train", "dev"):
        (tmp_path / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    base = ["finetune", "classify", "--train", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"),
            "--model", str(model), "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--quiet"]  # fmt: skip
    r = _run(capsys, [*base, "--out", str(tmp_path / "r"), "--restarts", "3"])
    assert [x["seed"] for x in r["runs"]] == [42, 43, 44]
    assert r["metrics"]["accuracy"] == max(x["accuracy"] for x in r["runs"])
    assert r["hyperparameters"]["seed"] == max(r["runs"], key=lambda x: x["accuracy"])["seed"]

    f = _run(capsys, [*base, "--out", str(tmp_path / "f"), "--freeze-encoder"])
    before, after = (
        load_file(model / "model.safetensors"),
        load_file(tmp_path / "f" / "model" / "model.safetensors"),
    )
    for k, v in before.items():
        torch.testing.assert_close(after["bert." + k], v)  # BERT untouched
    assert f["hyperparameters"]["freeze_encoder"] is True

    # recomputing the layers in the backward pass changes memory, not the training: same per-step losses
    plain = _run(capsys, [*base, "--out", str(tmp_path / "p")])
    ckpt = _run(capsys, [*base, "--out", str(tmp_path / "c"), "--gradient-checkpointing"])
    assert ckpt["hyperparameters"]["gradient_checkpointing"] is True

    def losses(run_dir):
        return [json.loads(x)["loss"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]

    assert losses(tmp_path / "c") == pytest.approx(losses(tmp_path / "p"), abs=1e-5)
    assert plain["metrics"] == ckpt["metrics"]


def test_squad_subcommand_is_wired():
    from bertkit.cli import build_parser

    args = build_parser().parse_args(["finetune", "squad", "--model", "m", "--out", "o", "--train", "t.json"])
    assert callable(args.func) and args.model == "m" and args.epochs is None and args.version == "1.1"


KILLER = """
import os, signal, sys
from bertkit.cli import build_parser
from bertkit.cli.finetune import _settings
from bertkit.tasks.classify import classify_task_data
from bertkit.tasks.finetune import finetune
kill_at = int(sys.argv[1])
args = build_parser().parse_args(sys.argv[2:])
task = classify_task_data(args.train, args.dev, args.text_field, args.pair_field, args.label_field)
seen = []
def killer(rec):
    seen.append(rec["step"])
    if len(seen) == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
finetune(task, args.model, args.out, _settings(args), restarts=args.restarts, callbacks=[killer])
"""


def test_sigkill_and_resume_gives_bitwise_identical_losses(tmp_path, capsys, minilm_dir):
    """Two restarts (each in OUT/runs/...) with checkpoints every 4 steps; the process is killed with SIGKILL
    in step 6 of the second run and resumed with --resume: every loss, the metrics and the saved model are
    exactly those of an uninterrupted run. The killed process is a second run with the same seed, so the
    steps it logged before dying also show that the same seed gives the same losses."""
    import signal
    import subprocess
    import sys

    from safetensors.torch import load_file

    model = _tiny_model_dir(tmp_path / "tiny", minilm_dir)
    rows = [("good fine great", "1"), ("bad awful poor", "0"), ("a film", "1"), ("the plot", "0")] * 11
    for name in ("train", "dev"):
        (tmp_path / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    base = ["finetune", "classify", "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
            "--model", model, "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "16",
            "--restarts", "2", "--checkpoint-every", "4", "--quiet"]  # fmt: skip
    base = [str(x) for x in base]

    # Every run is a child with one environment: a run in this process would compute under whatever an earlier
    # test file on the same xdist worker left here, which once rounded differently.
    def child(*extra: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "bertkit", *base, *extra], env=child_env(),
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)

    ref = child("--out", str(tmp_path / "ref"))  # uninterrupted
    assert ref["steps"] == 12  # ceil(44 / 8) = 6 steps per epoch, 2 epochs

    killed = tmp_path / "killed"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    p = subprocess.run([sys.executable, script, "18", *base, "--out", str(killed)], env=child_env(),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    run1, run2 = sorted((killed / "runs").iterdir())
    assert (run1.name, run2.name) == ("01-b8-lr0.001-e2-s42", "02-b8-lr0.001-e2-s43")
    assert [x.name for x in sorted((run2 / "checkpoints").iterdir())] == ["step-00000004.pt"]
    assert not (killed / "metrics.json").exists() and not (killed / "model").exists()

    resumed = child("--out", str(killed), "--resume")
    for run in ("01-b8-lr0.001-e2-s42", "02-b8-lr0.001-e2-s43"):
        a, b = (
            [(r["step"], r["loss"]) for r in map(json.loads, (d / "runs" / run / "metrics.jsonl").open())]
            for d in (tmp_path / "ref", killed)
        )
        assert a == b and len(a) == 12  # floats compared exactly
    assert json.loads((killed / "train_log.json").read_text()) == json.loads(
        (tmp_path / "ref" / "train_log.json").read_text()
    )
    for key in ("metrics", "runs", "hyperparameters", "final_loss", "first_loss", "steps"):
        assert resumed[key] == ref[key], key
    a = load_file(tmp_path / "ref" / "model" / "model.safetensors")
    b = load_file(killed / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # a new run into a directory holding checkpoints must not silently overwrite them
    assert main([*base, "--out", str(killed)]) == 2
    assert "--resume" in capsys.readouterr().err
