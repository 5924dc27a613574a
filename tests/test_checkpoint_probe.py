"""experiments/checkpoint_probe.py: a training checkpoint becomes the model it held (a real short run), and the
report's tables, verdicts and plot come from the result files (fake rows, no fine-tuning)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bertkit.train.checkpoint import list_checkpoints
from experiments.checkpoint_probe import model_dir_at, report


def test_each_checkpoint_becomes_the_model_it_held(tmp_path, tiny_data):
    from bertkit.heads.pretraining import BertForPreTraining
    from bertkit.pretrain import PretrainConfig, pretrain

    run = tmp_path / "run"
    cfg = PretrainConfig(data=str(tiny_data), out=str(run), preset="tiny", objective="mlm", steps=4,
                         batch_size=4, max_seq_length=64, max_predictions_per_seq=10, lr=1e-3, warmup=0.0,
                         checkpoint_every=2, keep_last=5, progress=False,
                         model_overrides={"max_position_embeddings": 64})  # fmt: skip
    pretrain(cfg)
    found = list_checkpoints(run)
    assert [step for step, _ in found] == [2, 4]
    final = BertForPreTraining.from_pretrained(run / "model").state_dict()
    at_4 = BertForPreTraining.from_pretrained(
        model_dir_at(run, tiny_data, found[1][1], tmp_path)
    ).state_dict()
    at_2 = BertForPreTraining.from_pretrained(
        model_dir_at(run, tiny_data, found[0][1], tmp_path)
    ).state_dict()
    rand = BertForPreTraining.from_pretrained(model_dir_at(run, tiny_data, None, tmp_path)).state_dict()
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert all(torch.equal(final[k], at_4[k]) for k in final)  # the last checkpoint is the exported model
    assert not torch.equal(at_2[key], at_4[key]) and not torch.equal(rand[key], at_2[key])
    assert (tmp_path / "random" / "vocab.txt").read_text() == (tiny_data / "vocab.txt").read_text()


def _result(gains: list[float], sst2: list[tuple[float, float]]) -> dict:
    cfg = {"preset": "tiny", "objective": "mlm", "steps": 200, "batch_size": 16, "max_seq_length": 128, "lr": 1e-3,
           "warmup": 0.06, "masked_lm_prob": 0.15, "max_predictions_per_seq": 20, "seed": 0, "valid_documents": 100,
           "checkpoint_every": 100, "keep_last": 5, "model_overrides": {}}  # fmt: skip
    rows = [
        {"step": 100 * i, "tokens": 100 * i * 2048, "sst2_lr": 1e-3, "sst2_mean": m, "sst2_std": s,
         "heldout": {"mlm_loss": 9.0 - i, "unigram_loss": 7.0, "word_order_gain": g, "mlm_accuracy": 0.1 * i}}
        for i, (g, (m, s)) in enumerate(zip(gains, sst2))
    ]  # fmt: skip
    return {"command": "python experiments/checkpoint_probe.py RUN", "commit": "abc1234", "cpu": "Fake CPU",
            "torch": "2.13.0", "train_examples": 4000, "lrs": [3e-4, 1e-3], "seeds": [1, 2, 3],
            "run_config": cfg, "rows": rows}  # fmt: skip


def test_report_rows_and_verdicts_come_from_the_files(tmp_path):
    doc = tmp_path / "probe.md"
    flat = _result([0.0, 0.05, 0.08], [(72.0, 2.0), (71.0, 1.0), (73.0, 1.5)])
    learns = _result([0.0, 0.3, 2.0], [(72.0, 1.0), (74.0, 0.5), (80.0, 1.0)])
    text = report([flat, learns], doc, ["flat.json", "learns.json"])
    assert f"--report {doc} --results flat.json learns.json" in text
    assert "| 200 | 0.4M | 7.000 | 7.000 | 2.000 | 20.0 | 80.0 ± 1.0 | 0.001 |" in text
    assert "never >= 0.1: the model still reads its context as a bag of words" in text  # the flat run
    assert "first >= 0.1 at step 100 (0.2M tokens)" in text  # the run that learns word order
    assert "(+1.0; larger seed spread 2.0: NOT beyond the spread)" in text
    assert "(+8.0; larger seed spread 1.0: beyond the spread)" in text
    assert "`bertkit pretrain --data DATA --out RUN --preset tiny --objective mlm --steps 200" in text
    png = doc.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.name in text


def test_report_command_writes_the_doc_from_result_files(tmp_path):
    from experiments.checkpoint_probe import main

    files = []
    for i, gains in enumerate(([0.0, 0.2], [0.0, 0.01])):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps(_result(gains, [(70.0, 1.0), (71.0, 1.0)])))
        files.append(str(f))
    doc = tmp_path / "docs" / "probe.md"
    doc.parent.mkdir()
    assert main(["--report", str(doc), "--results", *files]) == 0
    text = Path(doc).read_text()
    assert text.count("## tiny, mlm, 16 x 128, 15% masked, dropout 0.1, 200 steps planned") == 2
