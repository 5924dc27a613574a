"""Distillation: students built from teacher layers are exact copies of those layers, the soft-target loss
is Hinton's, and distilling makes a student agree with its teacher (sequence, token, embeddings)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.config import BertConfig
from bertkit.distill import (
    DistillSettings,
    distill_embeddings,
    distill_task,
    parse_student,
    remeasure_speed,
    soft_target_loss,
    student_from_preset,
    student_from_teacher,
)
from bertkit.errors import UserError
from bertkit.heads.finetune import BertForSequenceClassification, BertForTokenClassification
from bertkit.sentence.encoder import SentenceEncoder
from bertkit.tasks.glue import Example
from bertkit.tasks.metrics import accuracy, ner_metrics
from bertkit.tasks.ner import Sentence
from bertkit.tasks.spec import TaskData
from bertkit.tokenizer import Tokenizer

GOOD = "good nice great fine".split()
BAD = "bad awful poor sad".split()
OTHER = "the a movie film was is very quite".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *GOOD, *BAD, *OTHER]


def _teacher(tmp_path, cls, labels: list[str], layers: int = 4):
    torch.manual_seed(0)
    cfg = BertConfig.preset(
        "tiny", vocab_size=len(VOCAB), max_position_embeddings=32, num_hidden_layers=layers
    )
    cfg.id2label = dict(enumerate(labels))
    model = cls(cfg)
    model.save_pretrained(tmp_path / "teacher")
    Tokenizer.from_vocab(VOCAB).save_pretrained(tmp_path / "teacher")
    return model


def test_parse_student_and_layer_copy(tmp_path):
    assert parse_student("layers:0,2") == ([0, 2], None) and parse_student("mini") == (None, "mini")
    with pytest.raises(UserError, match="layers:I,J,K or a preset"):
        parse_student("huge")
    teacher = _teacher(tmp_path, BertForSequenceClassification, ["neg", "pos"]).eval()
    student = student_from_teacher(teacher, [1, 3]).eval()
    assert student.config.num_hidden_layers == 2 and teacher.config.num_hidden_layers == 4
    for i, j in enumerate([1, 3]):
        for (n, a), (_, b) in zip(
            student.bert.encoder.layer[i].state_dict().items(),
            teacher.bert.encoder.layer[j].state_dict().items(),
        ):
            torch.testing.assert_close(a, b, msg=n)
    torch.testing.assert_close(student.classifier.weight, teacher.classifier.weight)
    ids = torch.tensor([[2, 5, 6, 3]])
    full = student_from_teacher(teacher, [0, 1, 2, 3]).eval()  # all layers: the teacher itself
    torch.testing.assert_close(full(ids).logits, teacher(ids).logits)
    with pytest.raises(UserError, match="cannot take"):
        student_from_teacher(teacher, [4])
    before = torch.random.get_rng_state()
    small = student_from_preset(teacher, "tiny", seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is untouched
    assert small.config.num_labels == 2 and small.config.vocab_size == len(VOCAB)


def test_soft_target_loss_is_hinton():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    y = torch.tensor([0, 1, 2, 1, 0])
    total, soft, hard = soft_target_loss(s, t, y, temperature=3.0, alpha=0.7)
    p = F.softmax(t / 3, -1)
    want_soft = 9 * (p * (p.log() - F.log_softmax(s / 3, -1))).sum(-1).mean()
    torch.testing.assert_close(soft, want_soft)
    torch.testing.assert_close(hard, F.cross_entropy(s, y))
    torch.testing.assert_close(total, 0.7 * want_soft + 0.3 * F.cross_entropy(s, y))
    assert soft_target_loss(t, t, y, 2.0, 1.0)[0].abs() < 1e-6  # a student equal to the teacher: no soft loss


def _seq_task(rng: random.Random, n: int) -> list[Example]:
    out = []
    for i in range(n):
        pos = rng.random() < 0.5
        words = rng.sample(OTHER, 3) + [rng.choice(GOOD if pos else BAD)]
        rng.shuffle(words)
        out.append(Example(str(i), " ".join(words), None, "pos" if pos else "neg"))
    return out


def test_distill_sequence_classification_student_agrees_with_teacher(tmp_path):
    rng = random.Random(0)
    teacher = _teacher(tmp_path, BertForSequenceClassification, ["neg", "pos"])
    train, dev = _seq_task(rng, 256), _seq_task(rng, 64)
    # the teacher's own labels as gold: a student that learns from it must come to agree with it
    tok = Tokenizer.from_pretrained(tmp_path / "teacher")
    with torch.no_grad():
        enc = tok([e.text_a for e in train + dev], max_length=16, return_tensors="pt")
        pred = teacher.eval()(**enc).logits.argmax(-1).tolist()
    relabel = [Example(e.guid, e.text_a, None, ["neg", "pos"][p]) for e, p in zip(train + dev, pred)]
    task = TaskData(
        "toy",
        "seq",
        relabel[:256],
        relabel[256:],
        ["neg", "pos"],
        lambda p, g: {"accuracy": 100 * accuracy(p, g)},
        "accuracy",
    )
    s = DistillSettings(epochs=3, batch_size=16, lr=1e-3, max_seq_length=16, progress=False, temperature=2.0)
    report = distill_task(tmp_path / "teacher", "layers:0,2", task, tmp_path / "out", s)
    assert report["teacher"]["main"] == 100.0  # gold = the teacher's predictions
    assert report["student"]["main"] >= 90.0, report["student"]
    assert report["student"]["parameters"] < report["teacher"]["parameters"]
    assert report["student"]["layers"] == 2 and report["student"]["throughput_batch32"] > 0
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["kept"] == pytest.approx(report["student"]["main"] / 100.0)
    assert (
        BertForSequenceClassification.from_pretrained(tmp_path / "out" / "model").config.num_hidden_layers
        == 2
    )
    assert saved["student_spec"] == "layers:0,2" and 0.0 <= saved["speed_load"]["cpu_busy_before"] <= 1.0
    # timing the two again on their own (the re-measure step of experiments/retrieval/distill_sst2.sh)
    again = remeasure_speed(
        tmp_path / "teacher", tmp_path / "out" / "model", task, 16, repeats=2, busy_seconds=0.1
    )
    assert set(again) >= {"teacher", "student", "speedup_batch32", "speedup_batch1", "load_average_before"}
    for name in ("teacher", "student"):
        assert again[name]["latency_ms_batch1"] > 0 and again[name]["throughput_batch32"] > 0
    assert again["speedup_batch32"] == pytest.approx(
        again["student"]["throughput_batch32"] / again["teacher"]["throughput_batch32"]
    )


def test_distill_token_classification_from_a_preset(tmp_path):
    rng = random.Random(1)
    _teacher(tmp_path, BertForTokenClassification, ["O", "B-POS", "B-NEG"], layers=2)

    def sent() -> Sentence:
        words = rng.sample(OTHER, 3) + [rng.choice(GOOD), rng.choice(BAD)]
        rng.shuffle(words)
        return Sentence(words, ["B-POS" if w in GOOD else "B-NEG" if w in BAD else "O" for w in words])

    task = TaskData(
        "toy-ner",
        "token",
        [sent() for _ in range(192)],
        [sent() for _ in range(32)],
        ["O", "B-POS", "B-NEG"],
        ner_metrics,
        "f1",
    )
    s = DistillSettings(epochs=4, batch_size=16, lr=2e-3, alpha=0.5, max_seq_length=16, progress=False)
    report = distill_task(tmp_path / "teacher", "tiny", task, tmp_path / "out", s)
    # a random teacher is useless, so the hard labels must carry the student (alpha < 1)
    assert report["student"]["main"] > 0.8, report["student"]["metrics"]  # ner_metrics are fractions
    card = (tmp_path / "out" / "model" / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: token-classification" in card and "distilled from" in card


def test_distill_embeddings_regresses_the_teacher(tmp_path):
    torch.manual_seed(0)
    teacher = SentenceEncoder(
        BertForSequenceClassification(
            BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=32, num_hidden_layers=4)
        ).bert,
        Tokenizer.from_vocab(VOCAB),
        normalize=True,
        max_seq_length=16,
    )
    teacher.save(tmp_path / "teacher")
    rng = random.Random(2)
    texts = [" ".join(rng.sample(GOOD + BAD + OTHER, 4)) for _ in range(300)]
    s = DistillSettings(epochs=4, batch_size=32, lr=1e-3, max_seq_length=16, progress=False)
    report = distill_embeddings(tmp_path / "teacher", "layers:0,3", texts, tmp_path / "out", s)
    assert report["student_parameters"] < report["teacher_parameters"]
    assert report["mean_cosine_to_teacher"] > 0.98
    assert np.isfinite(report["final_loss"])
    card = (tmp_path / "out" / "model" / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: sentence-similarity" in card and "distilled with bertkit" in card
    assert str(tmp_path / "teacher") in card and "mean_cosine_to_teacher" in card


def test_cli_distill_embed_and_errors(tmp_path, capsys):
    from bertkit.cli import main

    torch.manual_seed(0)
    cfg = BertConfig.preset("tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    SentenceEncoder(
        BertForSequenceClassification(cfg).bert, Tokenizer.from_vocab(VOCAB), max_seq_length=16
    ).save(tmp_path / "t")
    rng = random.Random(3)
    (tmp_path / "texts.txt").write_text("\n".join(" ".join(rng.sample(OTHER, 3)) for _ in range(40)) + "\n")
    base = [
        "distill",
        "--teacher",
        str(tmp_path / "t"),
        "--task",
        "embed",
        "--texts",
        str(tmp_path / "texts.txt"),
    ]
    assert (
        main(
            [
                *base,
                "--student",
                "layers:1",
                "--out",
                str(tmp_path / "o"),
                "--epochs",
                "1",
                "--batch-size",
                "8",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == len(set((tmp_path / "texts.txt").read_text().split("\n")) - {""}) // 8
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["student"] == "layers:1"
    assert main([*base, "--student", "huge", "--out", str(tmp_path / "o2")]) == 2
    assert "layers:I,J,K or a preset" in capsys.readouterr().err
    assert (
        main(
            [
                "distill",
                "--teacher",
                str(tmp_path / "t"),
                "--student",
                "tiny",
                "--task",
                "glue",
                "--out",
                str(tmp_path / "o3"),
            ]
        )
        == 2
    )
    assert "--task-name" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()  # refused runs leave nothing
