"""`bertkit distill` with a ModernBERT teacher: a ModernBERT student of its layers (those that keep the
global/local pattern) or of a preset size, or a BERT student (bert:PRESET) on the teacher's BPE vocabulary;
every student reloads in transformers with bertkit's logits."""

from __future__ import annotations

import json

import pytest
import torch
from bpe_folder import modernbert_folder
from test_modernbert_downstream import _classify_files

from bertkit.cli import main
from bertkit.distill import DistillSettings, distill_task, student_from_teacher
from bertkit.errors import UserError
from bertkit.modernbert import ModernBertForSequenceClassification
from bertkit.tasks.classify import classify_task_data
from bertkit.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ModernBertForSequenceClassification"):
    pytest.skip("this transformers has no ModernBERT", allow_module_level=True)

TEXTS = ["the river was wide", "naïve café\n\nand more words than the window holds " * 3, "東京 😀"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A 3-layer ModernBERT classifier (global attention at layers 0 and 2) and a task for it."""
    path = tmp_path_factory.mktemp("distill-mb")
    modernbert_folder(path / "teacher", transformers.ModernBertForSequenceClassification)
    config_file = path / "teacher" / "config.json"
    config = json.loads(config_file.read_text())  # the task's labels (the head itself is untrained)
    config.update(id2label={"0": "no", "1": "yes"}, label2id={"no": 0, "yes": 1})
    config_file.write_text(json.dumps(config))
    return path / "teacher", classify_task_data(*_classify_files(path))


def _same_logits(model_dir, ours_cls, theirs_cls) -> None:
    tok = Tokenizer.from_pretrained(model_dir)
    batch = tok(TEXTS, max_length=48, truncation=True)
    ours = ours_cls.from_pretrained(model_dir).eval()
    theirs = theirs_cls.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    if "ModernBert" in theirs_cls.__name__:
        batch.pop("token_type_ids")
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, theirs(**batch).logits, atol=1e-5, rtol=1e-5)


def test_layers_of_a_modernbert_teacher(teacher):
    """layers:0,1 is the teacher cut after two layers (transformers' model loaded with 2 layers); layers that
    would change a layer's attention kind, or not start at layer 0, are refused."""
    folder, _ = teacher
    model = ModernBertForSequenceClassification.from_pretrained(folder).eval()
    student = student_from_teacher(model, [0, 1]).eval()
    cut = transformers.ModernBertForSequenceClassification.from_pretrained(
        folder, num_hidden_layers=2, attn_implementation="sdpa"
    ).eval()
    batch = Tokenizer.from_pretrained(folder)(TEXTS, max_length=48, truncation=True)
    batch.pop("token_type_ids")
    with torch.no_grad():
        torch.testing.assert_close(student(**batch).logits, cut(**batch).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(UserError, match="teacher layer 2 attends globally but would be student layer 1"):
        student_from_teacher(model, [0, 2])
    with pytest.raises(UserError, match="starts with the teacher's layer 0"):
        student_from_teacher(model, [1, 2])


@pytest.mark.parametrize(
    "spec, model_type, ours",
    [
        ("layers:0,1", "modernbert", "ModernBertForSequenceClassification"),
        ("tiny", "modernbert", "ModernBertForSequenceClassification"),
        ("bert:tiny", "bert", "BertForSequenceClassification"),
    ],
)
def test_distill_a_modernbert_teacher(teacher, tmp_path, spec, model_type, ours):
    from bertkit import heads, modernbert

    folder, task = teacher
    s = DistillSettings(epochs=1, batch_size=16, lr=1e-3, max_seq_length=48, progress=False)
    report = distill_task(folder, spec, task, tmp_path / "out", s)
    assert report["student"]["layers"] == 2  # tiny: 2 layers of 128 (larger than this teacher's 32)
    model_dir = tmp_path / "out" / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == model_type and config["architectures"] == [ours]
    assert config["id2label"] == {"0": "no", "1": "yes"}
    assert config["hidden_size"] == (32 if spec.startswith("layers") else 128)
    module = modernbert if model_type == "modernbert" else heads
    _same_logits(model_dir, getattr(module, ours), getattr(transformers, ours))


def test_cli_refusals(teacher, tmp_path, capsys):
    folder, task = teacher
    base = ["distill", "--teacher", str(folder), "--task", "classify", "--train", task.dev_file,
            "--dev", task.dev_file, "--out", str(tmp_path / "out")]  # fmt: skip
    for student, extra, words in [
        ("layers:0,2", [], "global attention every 2 layers"),
        ("bert:tiny", ["--max-seq-length", "600"], "--max-seq-length 600 is longer than the student's 512"),
        ("bert:huge", [], "bert:PRESET"),
    ]:
        assert main([*base, "--student", student, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


@pytest.mark.parametrize("spec, encoder", [("layers:0,1", "ModernBertModel"), ("tiny", "ModernBertModel"),
                                           ("bert:tiny", "BertModel")])  # fmt: skip
def test_distill_embeddings_of_a_modernbert_teacher(tmp_path, spec, encoder):
    from bpe_folder import generated_texts

    from bertkit.distill import distill_embeddings
    from bertkit.sentence.encoder import SentenceEncoder

    modernbert_folder(tmp_path / "teacher")
    texts = [t.replace("\n", " ").strip() or "x" for t in generated_texts(48, seed=5)]
    s = DistillSettings(epochs=1, batch_size=16, lr=1e-3, max_seq_length=48, progress=False)
    report = distill_embeddings(tmp_path / "teacher", spec, texts, tmp_path / "out", s)
    student = SentenceEncoder.from_pretrained(tmp_path / "out" / "model")
    assert type(student.model).__name__ == encoder and student.model.config.num_hidden_layers == 2
    assert student.encode(texts[:3]).shape == (3, 32)  # the teacher's dimension (a Dense layer when wider)
    assert report["mean_cosine_to_teacher"] > 0
