"""The command line's bad-input battery: every case is a real `bertkit` process (forked after one import, see
tests/badinput.py) given one bad argument, file or folder; each must exit 2 with one line naming the
file/field/limit, print no traceback, and leave the workspace exactly as it was (no output created, nothing
overwritten). The server's cases are in tests/test_bad_inputs_server.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from badinput import assert_refused, run_forked, snapshot

LATIN1 = "Café naïve déjà vu\n\nsecond document here\n".encode("latin-1")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, tiny_data, tiny_model) -> Path:
    """A workspace holding every input the cases need, good and bad."""
    w = tmp_path_factory.mktemp("bad_inputs")
    shutil.copytree(tiny_data, w / "data")
    shutil.copytree(tiny_model, w / "model")
    (w / "corpus.txt").write_text("The first sentence.\nA second one.\n\nAnother document.\nIt ends.\n")
    (w / "latin1.txt").write_bytes(LATIN1)
    import gzip
    import lzma

    text = "".join(f"Sentence {i} of a compressed corpus.\n\n" for i in range(500)).encode()
    xz = lzma.compress(text)
    (w / "truncated.txt.xz").write_bytes(xz[: len(xz) // 2])
    gz = bytearray(gzip.compress(text))
    gz[len(gz) // 2] ^= 0xFF
    (w / "corrupt.txt.gz").write_bytes(bytes(gz))
    (w / "no_corpus" / "sub").mkdir(parents=True)
    (w / "no_corpus" / ".hidden.txt").write_text("hidden files are not corpus files\n")
    shutil.copy(tiny_data / "vocab.txt", w / "vocab.txt")
    (w / "vocab_latin1.txt").write_bytes(
        (tiny_data / "vocab.txt").read_bytes() + "caf\xe9\n".encode("latin-1")
    )
    (w / "existing.txt").write_text("keep me\n")
    (w / "existing_out").mkdir()
    (w / "existing_out" / "metrics.json").write_text('{"keep": true}\n')
    (w / "badtype.toml").write_text('steps = "many"\n')
    (w / "invalid.toml").write_text("steps = = 3\n")
    (w / "unknown.toml").write_text("stepz = 3\n")
    (w / "neglr.toml").write_text("lr = -1.0\n")
    (w / "badphase.toml").write_text("[[phases]]\nsteps = 0\n")
    (w / "corrupt_data").mkdir()
    (w / "corrupt_data" / "manifest.json").write_text('{"format": "bertkit-shards", "shards": [')
    shutil.copy(tiny_data / "vocab.txt", w / "corrupt_data" / "vocab.txt")
    (w / "novocab_data").mkdir()
    shutil.copy(tiny_data / "manifest.json", w / "novocab_data" / "manifest.json")
    (w / "trunc_model").mkdir()
    shutil.copy(tiny_model / "config.json", w / "trunc_model" / "config.json")
    data = (tiny_model / "model.safetensors").read_bytes()
    (w / "trunc_model" / "model.safetensors").write_bytes(data[: len(data) // 3])
    (w / "escape_st").mkdir()
    (w / "escape_st" / "modules.json").write_text(
        json.dumps(
            [{"idx": 0, "name": "0", "path": "../model", "type": "sentence_transformers.models.Transformer"}]
        )
    )
    (w / "abs_st").mkdir()
    (w / "abs_st" / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": str(w / "model"),
                    "type": "sentence_transformers.models.Transformer",
                }
            ]
        )
    )
    (w / "escape_shards").mkdir()
    shutil.copy(tiny_model / "config.json", w / "escape_shards" / "config.json")
    (w / "escape_shards" / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {},
                "weight_map": {"embeddings.word_embeddings.weight": "../model/model.safetensors"},
            }
        )
    )
    (w / "surrogate.jsonl").write_text('{"text": "ok"}\n{"text": "bad \\ud800 here"}\n')
    (w / "texts.txt").write_text("one text\nanother text\n")
    (w / "train.csv").write_text("text,label\n" + "good fine,1\nbad poor,0\n" * 4)
    (w / "glue" / "SST-2").mkdir(parents=True)
    rows = "sentence\tlabel\ngood movie\t1\nbad movie\t0\n"
    (w / "glue" / "SST-2" / "train.tsv").write_text(rows)
    (w / "glue" / "SST-2" / "dev.tsv").write_text(rows + "odd movie\t7\n")
    (w / "glue_latin1" / "SST-2").mkdir(parents=True)
    (w / "glue_latin1" / "SST-2" / "train.tsv").write_bytes(b"sentence\tlabel\ncaf\xe9 movie\t1\nbad\t0\n")
    (w / "glue_latin1" / "SST-2" / "dev.tsv").write_text(rows)
    (w / "ner.txt").write_text("EU B-ORG\nrejects O\n\nPeter B-PER\n")
    (w / "ner_latin1.txt").write_bytes(b"caf\xe9 O\nrejects O\n")
    import torch

    from bertkit.train.checkpoint import rng_state, save_checkpoint

    foreign = {"step": 1, "model": {"other.weight": torch.zeros(3)}, "optimizer": {}, "rng": [rng_state()]}
    save_checkpoint(w / "foreign_run", 1, foreign)  # a valid checkpoint of another model
    from safetensors.torch import save_file

    shutil.copytree(tiny_model, w / "foreign_weights")  # the tiny model's config, another model's tensors
    save_file({"other.weight": torch.zeros(3)}, str(w / "foreign_weights" / "model.safetensors"))
    (w / "squad.json").write_text(json.dumps({"version": "1.1", "data": []}))
    qa = {"id": "q1", "question": "who?", "answers": [{"text": "Ann", "answer_start": 0}]}
    para = {"context": "Ann sat.", "qas": [qa]}
    squad_file(w / "squad_null_question.json", [{**para, "qas": [{**qa, "question": None}]}])
    squad_file(w / "squad_dup_ids.json", [para, {**para, "qas": [{**qa, "question": "what?"}]}])
    glue(w / "glue_pos", "SST-2", "sentence\tlabel\ngood movie\tpos\nbad movie\t0\n")
    glue(w / "glue_2", "SST-2", "sentence\tlabel\ngood movie\t1\nbad movie\t2\n")
    sts = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    row = "0\tmain\tf\t2012\t0\ts\ts\ta cat\ta dog\t{}\n"
    glue(w / "stsb_7", "STS-B", sts + row.format("3.5") + row.format("7"))
    glue(w / "stsb_nan", "STS-B", sts + row.format("nan") + row.format("1"))
    damaged_indexes(w)
    bad_static_instances(w, tiny_data / "vocab.txt")
    for name, text in (("tok_json_invalid", "{"), ("tok_json_no_vocab", '{"model": {"type": "WordPiece"}}')):
        shutil.copytree(tiny_model, w / name)
        (w / name / "vocab.txt").unlink()
        (w / name / "tokenizer.json").write_text(text)
    head = "sent1,sent2,ending0,ending1,ending2,ending3,label\n"
    good = "A man sits.,He,stands.,runs.,sleeps.,eats.,0\n"
    (w / "swag_short.csv").write_text(head + good + "A man sits.,He,stands.\n")
    (w / "swag_empty_label.csv").write_text(head + good + "A man sits.,He,stands.,runs.,sleeps.,eats.,\n")
    shutil.copytree(tiny_model, w / "tok_word_limit")
    cfg = json.loads((w / "tok_word_limit" / "tokenizer_config.json").read_text())
    (w / "tok_word_limit" / "tokenizer_config.json").write_text(
        json.dumps({**cfg, "max_input_chars_per_word": -1})
    )
    return w


def squad_file(path: Path, paragraphs: list) -> None:
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))


def glue(root: Path, task: str, rows: str) -> None:
    (root / task).mkdir(parents=True)
    for split in ("train", "dev"):
        (root / task / f"{split}.tsv").write_text(rows)


def bad_static_instances(w: Path, vocab: Path) -> None:
    """Static instances (as ``prepare --static`` writes them) with one value out of range in every
    instance, each beside the vocabulary the ids refer to."""
    import numpy as np

    n_vocab = len(vocab.read_text(encoding="utf-8").splitlines())
    rng = np.random.default_rng(0)
    good = {
        "input_ids": rng.integers(5, n_vocab, (4, 64)),
        "input_mask": np.repeat((np.arange(64) < 20)[None].astype(np.int64), 4, 0),
        "segment_ids": np.zeros((4, 64), np.int64),
        "masked_lm_positions": np.tile(np.arange(1, 11), (4, 1)),
        "masked_lm_ids": rng.integers(5, n_vocab, (4, 10)),
        "masked_lm_weights": np.ones((4, 10), np.float32),
        "next_sentence_labels": np.zeros((4, 1), np.int64),
    }
    for name, key, col, value in (
        ("static_segment", "segment_ids", 3, 5),
        ("static_nsp", "next_sentence_labels", 0, 3),
        ("static_input_id", "input_ids", 2, n_vocab),
        ("static_masked_id", "masked_lm_ids", 0, -7),
    ):
        arrays = {k: v.copy() for k, v in good.items()}
        arrays[key][:, col] = value
        (w / name).mkdir()
        np.savez(w / name / "static_instances.npz", **arrays)
        shutil.copy(vocab, w / name / "vocab.txt")


def damaged_indexes(w: Path) -> None:
    """A good index and copies damaged one way each (``index info``/``search`` must refuse them in one line)."""
    import sqlite3

    import numpy as np

    pytest.importorskip("faiss")
    from bertkit.index import VectorStore

    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    np.save(w / "q4.npy", x[:1])
    with VectorStore.create(w / "idx", 4, "flat") as store:
        store.add(x, list(range(6)), [{"n": i} for i in range(6)])
        store.save()
    (w / "idx" / "writer.lock").unlink(missing_ok=True)  # what a reader finds: nothing it would create itself
    sql = {
        "idx_meta_not_json": "UPDATE meta SET value='{' WHERE key='store'",
        "idx_meta_no_dim": 'UPDATE meta SET value=\'{"metric": "cosine", "backend": "flat"}\' WHERE key=\'store\'',
        "idx_meta_backend": "UPDATE meta SET value=json_set(value, '$.backend', 'bogus') WHERE key='store'",
        "idx_short_blob": "UPDATE items SET vector=x'0000' WHERE id=3",
        "idx_bad_metadata": "UPDATE items SET metadata='{oops' WHERE id=1",
    }
    for name, statement in sql.items():
        shutil.copytree(w / "idx", w / name)
        with sqlite3.connect(w / name / "store.db") as con:
            con.execute(statement)
        con.close()
        if name == "idx_short_blob":  # no snapshot: the backend is rebuilt from the rows
            for snap in (w / name).glob("snapshot-*"):
                shutil.rmtree(snap)
    (w / "idx_garbage").mkdir()
    (w / "idx_garbage" / "store.db").write_bytes(b"this is not a database\n" * 200)


M, D, OUT, EX = "model", "data", "new_out", "existing_out"  # paths relative to the workspace
CLS = ["finetune", "classify", "--train", "train.csv", "--dev", "train.csv", "--model", M, "--quiet"]
PRE = ["pretrain", "--data", D, "--preset", "tiny", "--steps", "2", "--batch-size", "2", "--quiet",
       "--max-seq-length", "64"]  # fmt: skip
PREP = ["prepare", "--corpus", "corpus.txt", "--vocab", "vocab.txt", "--quiet"]
VOC = ["vocab", "--corpus", "corpus.txt", "--quiet"]
SQ = ["finetune", "squad", "--model", M, "--train"]
SWAG = ["finetune", "swag", "--model", M, "--quiet", "--train"]
STATIC = ["pretrain", *PRE[3:], "--out", OUT, "--data"]  # PRE with another --data

# (case id, argv, words the one error line must contain)
CASES = [
    # vocab
    ("vocab-size-negative", [*VOC, "--vocab-size", "-5", "--out", "v.txt"], ["--vocab-size", "-5"]),
    ("vocab-size-not-int", [*VOC, "--vocab-size", "many", "--out", "v.txt"], ["--vocab-size", "many"]),
    ("vocab-min-frequency-0", [*VOC, "--vocab-size", "50", "--min-frequency", "0", "--out", "v.txt"],
     ["--min-frequency"]),
    ("vocab-out-exists", [*VOC, "--vocab-size", "50", "--out", "existing.txt"], ["existing.txt", "already exists"]),
    ("vocab-corpus-missing", ["vocab", "--corpus", "nope.txt", "--vocab-size", "50", "--out", "v.txt"], ["nope.txt"]),
    ("vocab-corpus-latin1", ["vocab", "--corpus", "latin1.txt", "--vocab-size", "50", "--out", "v.txt"],
     ["latin1.txt", "UTF-8"]),
    ("vocab-size-tiny", [*VOC, "--vocab-size", "2", "--out", "v.txt"], ["--vocab-size"]),
    ("vocab-corpus-truncated-xz", ["vocab", "--corpus", "corpus.txt", "truncated.txt.xz", "--vocab-size", "50",
                                   "--out", "v.txt"], ["truncated.txt.xz", "corrupt or truncated xz"]),
    ("vocab-corpus-dir-without-files", ["vocab", "--corpus", "no_corpus", "--vocab-size", "50", "--out", "v.txt"],
     ["no_corpus", "no files"]),
    # prepare
    ("prepare-max-seq-negative", [*PREP, "--out", OUT, "--max-seq-length", "-1"], ["--max-seq-length", "-1"]),
    ("prepare-shard-size-negative", [*PREP, "--out", OUT, "--shard-size-mb", "-1"], ["--shard-size-mb"]),
    ("prepare-shard-size-nan", [*PREP, "--out", OUT, "--shard-size-mb", "nan"], ["--shard-size-mb", "finite"]),
    ("prepare-mlm-prob-2", [*PREP, "--out", OUT, "--masked-lm-prob", "2"], ["--masked-lm-prob", "probability"]),
    ("prepare-short-seq-prob-negative", [*PREP, "--out", OUT, "--short-seq-prob", "-0.1"], ["--short-seq-prob"]),
    ("prepare-workers-0", [*PREP, "--out", OUT, "--workers", "0"], ["--workers"]),
    ("prepare-dupe-factor-0", [*PREP, "--out", OUT, "--dupe-factor", "0"], ["--dupe-factor"]),
    ("prepare-max-predictions-0", [*PREP, "--out", OUT, "--max-predictions-per-seq", "0"],
     ["--max-predictions-per-seq"]),
    ("prepare-out-is-file", [*PREP, "--out", "existing.txt"], ["existing.txt", "is a file"]),
    ("prepare-out-exists", [*PREP, "--out", EX], [EX, "already exists"]),
    ("prepare-vocab-latin1", ["prepare", "--corpus", "corpus.txt", "--vocab", "vocab_latin1.txt", "--out", OUT],
     ["vocab_latin1.txt", "UTF-8"]),
    ("prepare-vocab-missing", ["prepare", "--corpus", "corpus.txt", "--vocab", "nope.txt", "--out", OUT],
     ["nope.txt"]),
    ("prepare-corpus-latin1", ["prepare", "--corpus", "latin1.txt", "--vocab", "vocab.txt", "--out", OUT],
     ["latin1.txt", "UTF-8"]),
    ("prepare-corpus-corrupt-gz", ["prepare", "--corpus", "corpus.txt", "corrupt.txt.gz", "--vocab", "vocab.txt",
                                   "--out", OUT], ["corrupt.txt.gz", "corrupt or truncated gzip"]),
    ("prepare-corpus-dir-without-files", [*PREP, "--corpus", "no_corpus", "--out", OUT], ["no_corpus", "no files"]),
    ("prepare-resume-nothing", [*PREP, "--out", OUT, "--resume"], ["--resume", "nothing to resume"]),
    # pretrain
    ("pretrain-lr-negative", [*PRE, "--out", OUT, "--lr", "-1"], ["--lr", "-1"]),
    ("pretrain-lr-nan", [*PRE, "--out", OUT, "--lr", "nan"], ["--lr", "finite"]),
    ("pretrain-steps-0", [*PRE, "--out", OUT, "--steps", "0"], ["--steps"]),
    ("pretrain-batch-negative", [*PRE, "--out", OUT, "--batch-size", "-2"], ["--batch-size"]),
    ("pretrain-warmup-negative", [*PRE, "--out", OUT, "--warmup", "-1"], ["--warmup"]),
    ("pretrain-mlm-prob-0", [*PRE, "--out", OUT, "--masked-lm-prob", "0"], ["--masked-lm-prob"]),
    ("pretrain-toml-wrong-type", ["pretrain", "--data", D, "--out", OUT, "--config", "badtype.toml"],
     ["badtype.toml", "steps", "integer"]),
    ("pretrain-toml-invalid", [*PRE, "--out", OUT, "--config", "invalid.toml"], ["invalid.toml", "TOML"]),
    ("pretrain-toml-unknown", [*PRE, "--out", OUT, "--config", "unknown.toml"], ["unknown.toml", "stepz"]),
    ("pretrain-toml-negative-lr", ["pretrain", "--data", D, "--out", OUT, "--config", "neglr.toml"],
     ["neglr.toml", "lr"]),
    ("pretrain-toml-bad-phase", ["pretrain", "--data", D, "--out", OUT, "--config", "badphase.toml"],
     ["badphase.toml", "phase 1", "steps"]),
    ("pretrain-config-missing", [*PRE, "--out", OUT, "--config", "nope.toml"], ["nope.toml"]),
    ("pretrain-corrupt-manifest", ["pretrain", "--data", "corrupt_data", "--out", OUT, "--preset", "tiny"],
     ["corrupt_data", "manifest.json"]),
    ("pretrain-no-vocab", ["pretrain", "--data", "novocab_data", "--out", OUT, "--preset", "tiny"],
     ["novocab_data", "vocab"]),
    ("pretrain-data-missing", ["pretrain", "--data", "nope_dir", "--out", OUT], ["nope_dir"]),
    ("pretrain-out-exists", [*PRE, "--out", EX], [EX, "already exists"]),
    ("pretrain-out-is-file", [*PRE, "--out", "existing.txt"], ["existing.txt", "is a file"]),
    ("pretrain-resume-nothing", [*PRE, "--out", OUT, "--resume"], ["nothing to resume"]),
    # info / tokenize
    ("tokenize-max-length-negative", ["tokenize", M, "hello world", "--max-length", "-3"], ["--max-length", "-3"]),
    ("tokenize-max-length-too-small", ["tokenize", M, "hello world", "--max-length", "1"], ["max_length 1", "too small"]),
    ("tokenize-pair-max-length-too-small", ["tokenize", M, "a b", "c d", "--max-length", "3"], ["max_length 3"]),
    ("info-truncated-weights", ["info", "trunc_model"], ["trunc_model", "model.safetensors"]),
    ("info-missing-dir", ["info", "nope_model"], ["nope_model"]),
    ("info-shard-index-escapes", ["info", "escape_shards"], ["escape_shards", "leaves the folder"]),
    # embed / features / predict
    ("embed-input-latin1", ["embed", M, "--input", "latin1.txt", "--out", "e.npy"], ["latin1.txt", "UTF-8"]),
    ("embed-input-surrogate", ["embed", M, "--input", "surrogate.jsonl", "--out", "e.npy"], ["surrogate"]),
    ("embed-out-exists", ["embed", M, "--input", "texts.txt", "--out", "existing.txt"], ["existing.txt", "already exists"]),
    ("embed-batch-size-0", ["embed", M, "--input", "texts.txt", "--out", "e.npy", "--batch-size", "0"], ["--batch-size"]),
    ("embed-input-missing", ["embed", M, "--input", "nope.txt", "--out", "e.npy"], ["nope.txt"]),
    ("embed-modules-json-climbs-out", ["embed", "escape_st", "--input", "texts.txt", "--out", "e.npy"],
     ["modules.json", "leaves the folder"]),
    ("embed-modules-json-absolute", ["embed", "abs_st", "--input", "texts.txt", "--out", "e.npy"],
     ["modules.json", "leaves the folder"]),
    ("embed-foreign-weights", ["embed", "foreign_weights", "--input", "texts.txt", "--out", "e.npy"],
     ["foreign_weights", "none of", "other.weight"]),
    ("features-input-latin1", ["features", M, "--input", "latin1.txt", "--out", "f.jsonl"], ["latin1.txt", "UTF-8"]),
    ("features-out-exists", ["features", M, "--input", "texts.txt", "--out", "existing.txt"], ["already exists"]),
    ("predict-max-seq-length-2", ["predict", M, "--input", "texts.txt", "--out", "p.jsonl", "--max-seq-length", "2"],
     ["--max-seq-length"]),
    ("predict-out-exists", ["predict", M, "--input", "texts.txt", "--out", "existing.txt"], ["already exists"]),
    # finetune
    ("classify-out-exists", [*CLS, "--out", EX], [EX, "already exists"]),
    ("classify-resume-nothing", [*CLS, "--out", OUT, "--resume"], ["nothing to resume"]),
    ("classify-epochs-0", [*CLS, "--out", OUT, "--epochs", "0"], ["--epochs"]),
    ("classify-lr-negative", [*CLS, "--out", OUT, "--lr", "-1"], ["--lr"]),
    ("classify-max-seq-length-1000", [*CLS, "--out", OUT, "--max-seq-length", "1000"], ["--max-seq-length"]),
    ("classify-checkpoint-every-negative", [*CLS, "--out", OUT, "--checkpoint-every", "-1"], ["--checkpoint-every"]),
    ("classify-train-missing", ["finetune", "classify", "--train", "nope.csv", "--dev", "train.csv", "--model", M,
                                "--out", OUT], ["nope.csv"]),
    ("glue-label-outside-set", ["finetune", "glue", "--task", "SST-2", "--data-dir", "glue/SST-2", "--model", M,
                                "--out", OUT, "--quiet"], ["dev.tsv", "7"]),
    ("glue-latin1", ["finetune", "glue", "--task", "SST-2", "--data-dir", "glue_latin1/SST-2", "--model", M,
                     "--out", OUT, "--quiet"], ["train.tsv", "UTF-8"]),
    ("ner-latin1", ["finetune", "ner", "--train", "ner_latin1.txt", "--dev", "ner.txt", "--model", M, "--out", OUT,
                    "--quiet"], ["ner_latin1.txt", "UTF-8"]),
    ("classify-lr-nan", [*CLS, "--out", OUT, "--lr", "nan"], ["--lr", "finite"]),
    ("classify-warmup-ratio-2", [*CLS, "--out", OUT, "--warmup-ratio", "2"], ["--warmup-ratio", "2"]),
    ("classify-weight-decay-negative", [*CLS, "--out", OUT, "--weight-decay", "-1"], ["--weight-decay"]),
    ("squad-lr-nan", [*SQ, "squad.json", "--dev", "squad.json", "--out", OUT, "--lr", "nan"], ["--lr", "finite"]),
    ("squad-warmup-ratio-2", [*SQ, "squad.json", "--dev", "squad.json", "--out", OUT, "--warmup-ratio", "2"],
     ["--warmup-ratio"]),
    ("glue-train-label-pos", ["finetune", "glue", "--task", "SST-2", "--data-dir", "glue_pos/SST-2", "--model", M,
                              "--out", OUT, "--quiet"], ["train.tsv", "line 2", "'pos'", "SST-2"]),
    ("glue-train-label-2", ["finetune", "glue", "--task", "SST-2", "--data-dir", "glue_2/SST-2", "--model", M,
                            "--out", OUT, "--quiet"], ["train.tsv", "line 3", "'2'"]),
    ("stsb-score-over-5", ["finetune", "glue", "--task", "STS-B", "--data-dir", "stsb_7/STS-B", "--model", M,
                           "--out", OUT, "--quiet"], ["train.tsv", "line 3", "'7'", "0-5"]),
    ("stsb-score-nan", ["finetune", "glue", "--task", "STS-B", "--data-dir", "stsb_nan/STS-B", "--model", M,
                        "--out", OUT, "--quiet"], ["train.tsv", "line 2", "'nan'"]),
    ("squad-question-null", [*SQ, "squad_null_question.json", "--dev", "squad_null_question.json", "--out", OUT],
     ["squad_null_question.json", "'q1'", "question", "string"]),
    ("squad-duplicate-ids", [*SQ, "squad_dup_ids.json", "--dev", "squad_dup_ids.json", "--out", OUT],
     ["squad_dup_ids.json", "'q1'", "twice"]),
    ("squad-doc-stride-0", ["finetune", "squad", "--train", "squad.json", "--dev", "squad.json", "--model", M,
                            "--out", OUT, "--doc-stride", "0"], ["--doc-stride", "0"]),
    ("classify-resume-foreign-checkpoint", [*CLS, "--out", "foreign_run", "--resume", "--checkpoint-every", "1"],
     ["foreign_run/checkpoints", "does not fit"]),
    ("tokenizer-json-invalid", ["tokenize", "tok_json_invalid", "hello"], ["tok_json_invalid/tokenizer.json", "JSON"]),
    ("tokenizer-json-no-vocab", ["tokenize", "tok_json_no_vocab", "hello"],
     ["tok_json_no_vocab/tokenizer.json", "model.vocab"]),
    ("tokenizer-word-limit-negative", ["tokenize", "tok_word_limit", "hello"],
     ["tok_word_limit/tokenizer_config.json", "max_input_chars_per_word", "-1"]),
    ("swag-short-row", [*SWAG, "swag_short.csv", "--dev", "swag_short.csv", "--out", OUT],
     ["swag_short.csv", "row 3", "ending1", "missing"]),
    ("swag-empty-label", [*SWAG, "swag_empty_label.csv", "--dev", "swag_empty_label.csv", "--out", OUT],
     ["swag_empty_label.csv", "row 3", "label is empty"]),
    ("static-segment-id-5", [*STATIC, "static_segment"], ["static_segment", "segment ids", "5"]),
    ("static-nsp-label-3", [*STATIC, "static_nsp"], ["static_nsp", "next_sentence_labels", "3"]),
    ("static-input-id-over-vocab", [*STATIC, "static_input_id"], ["static_input_id", "input id", "outside"]),
    ("static-masked-id-negative", [*STATIC, "static_masked_id"], ["static_masked_id", "masked id -7"]),
    # devices
    ("embed-device-bogus", ["embed", M, "--input", "texts.txt", "--out", "e.npy", "--device", "bogus"],
     ["--device", "bogus"]),
    ("embed-device-cuda-99", ["embed", M, "--input", "texts.txt", "--out", "e.npy", "--device", "cuda:99"],
     ["--device", "cuda:99"]),
    ("pretrain-device-bogus", [*PRE, "--out", OUT, "--device", "bogus"], ["--device", "bogus"]),
    ("serve-device-bogus", ["serve", M, "--device", "bogus"], ["--device", "bogus"]),
    ("serve-device-cuda-99", ["serve", M, "--device", "cuda:99"], ["--device", "cuda:99"]),
    ("serve-api-key-empty", ["serve", M, "--api-key", ""], ["--api-key", "empty"]),
    ("serve-cors-origin-path", ["serve", M, "--cors-origin", "https://a.example/app"],
     ["--cors-origin", "'https://a.example/app'", "scheme://host"]),
    ("serve-max-embed-all-values-0", ["serve", M, "--max-embed-all-values", "0"],
     ["--max-embed-all-values", "positive integer"]),
    # damaged indexes
    ("index-garbage-db", ["index", "info", "idx_garbage"], ["idx_garbage/store.db", "not a bertkit index"]),
    ("index-meta-not-json", ["index", "info", "idx_meta_not_json"], ["idx_meta_not_json/store.db", "not JSON"]),
    ("index-meta-no-dim", ["index", "info", "idx_meta_no_dim"], ["idx_meta_no_dim/store.db", "'dim'"]),
    ("index-meta-backend", ["index", "info", "idx_meta_backend"], ["idx_meta_backend/store.db", "'bogus'"]),
    ("index-short-blob", ["index", "info", "idx_short_blob"], ["idx_short_blob/store.db", "row 3", "2 bytes"]),
    ("index-bad-metadata", ["index", "search", "idx_bad_metadata", "--queries", "q4.npy", "-k", "6"],
     ["idx_bad_metadata/store.db", "row 1", "not JSON"]),
    # convert / export
    ("convert-out-exists", ["convert", "tf", "nope_ckpt", EX], [EX, "already exists"]),
    ("export-opset-1", ["export", "onnx", M, "m.onnx", "--opset", "1"], ["--opset", "1", "14"]),
    ("export-out-exists", ["export", "onnx", M, "existing.txt"], ["existing.txt", "already exists"]),
]  # fmt: skip


def test_battery_has_enough_cases():
    assert len(CASES) >= 55 and len({c[0] for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def results(ws, tmp_path_factory):
    before = snapshot(ws)
    logs = tmp_path_factory.mktemp("bad_inputs_logs")
    # Opening an SQLite store in WAL mode creates and removes its -wal/-shm files, which changes the index
    # folder's mtime: index cases watch the model folder only, and the sha256 snapshot of the whole workspace
    # (test_no_case_wrote_or_changed_anything) is what shows that they changed no file.
    cases = [{"argv": argv, "cwd": ws, "watch": ws / M if name.startswith("index-") else ws}
             for name, argv, _ in CASES]  # fmt: skip
    out = run_forked(cases, logs)
    return {"cases": dict(zip([c[0] for c in CASES], out)), "before": before, "after": snapshot(ws)}


def test_no_case_wrote_or_changed_anything(results):
    # sha256 of every file in the workspace, before and after all the cases
    before, after = results["before"], results["after"]
    assert {k for k in after if before.get(k) != after[k]} | {k for k in before if k not in after} == set()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line(case, results, ws):
    name, _, needles = case
    r = results["cases"][name]
    assert_refused(r, *needles)
    assert not r["changed"], "the workspace changed"
    assert not (ws / OUT).exists() and not (ws / "v.txt").exists() and not (ws / "e.npy").exists()


def test_overwrite_replaces_and_a_failed_overwrite_puts_the_old_output_back(tmp_path, tiny_data):
    from bertkit.cli import main

    (tmp_path / "c.txt").write_text("The first sentence.\nA second one.\n\nAnother document.\n")
    (tmp_path / "bad.txt").write_bytes(LATIN1)
    old = tmp_path / "d"
    old.mkdir()
    (old / "keep.txt").write_text("old run")
    base = ["prepare", "--vocab", str(tiny_data / "vocab.txt"), "--out", str(old), "--quiet", "--overwrite"]
    assert main([*base, "--corpus", str(tmp_path / "bad.txt")]) == 2  # fails after it started writing
    assert (
        snapshot(tmp_path) == {**snapshot(tmp_path), "d": "dir"}
        and (old / "keep.txt").read_text() == "old run"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "c.txt", "d"]  # no temp or backup left
    assert main([*base, "--corpus", str(tmp_path / "c.txt")]) == 0
    assert not (old / "keep.txt").exists() and (old / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "c.txt", "d"]


def test_a_failed_command_leaves_no_output_dir(tmp_path, tiny_data):
    from bertkit.cli import main

    (tmp_path / "bad.txt").write_bytes(LATIN1)
    argv = ["prepare", "--corpus", str(tmp_path / "bad.txt"), "--vocab", str(tiny_data / "vocab.txt"),
            "--out", str(tmp_path / "new" / "deep"), "--quiet"]  # fmt: skip
    assert main(argv) == 2
    assert not (tmp_path / "new" / "deep").exists()


def test_disk_full_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    from bertkit.cli import main
    from bertkit.data import vocab

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "v.txt"))

    monkeypatch.setattr(vocab, "train_vocab", full)
    (tmp_path / "c.txt").write_text("a b c\n")
    argv = [
        "vocab",
        "--corpus",
        str(tmp_path / "c.txt"),
        "--vocab-size",
        "50",
        "--out",
        str(tmp_path / "v.txt"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"bertkit vocab: error: {tmp_path / 'v.txt'}: No space left on device"]


def test_a_killed_overwrite_is_reported_and_the_old_output_kept(tmp_path, tiny_data, capsys):
    """SIGKILL after --overwrite moved the old output aside: the next run names where it is and touches nothing."""
    import signal
    import subprocess
    import sys

    from bertkit.cli import main

    old = tmp_path / "d"
    old.mkdir()
    (old / "keep.txt").write_text("old run")
    killed = (
        "import os, signal, sys\n"
        "from bertkit.cli.args import claim_output\n"
        "with claim_output(sys.argv[1], overwrite=True) as out:\n"
        "    out.mkdir()\n"
        "    (out / 'half.txt').write_text('half written')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    r = subprocess.run([sys.executable, "-c", killed, str(old)], capture_output=True)
    assert r.returncode == -signal.SIGKILL
    (tmp_path / "c.txt").write_text("The first sentence.\nA second one.\n\nAnother document.\n")
    base = ["prepare", "--corpus", str(tmp_path / "c.txt"), "--vocab", str(tiny_data / "vocab.txt"),
            "--out", str(old), "--quiet"]  # fmt: skip
    before = snapshot(tmp_path)
    for extra in ([], ["--overwrite"]):
        capsys.readouterr()
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "earlier --overwrite of it was killed" in err
        assert snapshot(tmp_path) == before  # neither the half-written output nor the old one was touched
    (backup,) = tmp_path.glob(".d.overwritten.*")
    assert (backup / "d" / "keep.txt").read_text() == "old run" and str(backup / "d") in err
    shutil.rmtree(old)  # what the message says to do to restore it
    (backup / "d").rename(old)
    backup.rmdir()
    assert main([*base, "--overwrite"]) == 0 and (old / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "d"]


def test_a_list_of_negative_layers_is_a_value_not_a_flag(tmp_path, tiny_model):
    """``features --layers -1,-2`` (the README's form) was parsed as an unknown flag and refused."""
    import numpy as np

    from bertkit.cli import main

    (tmp_path / "t.txt").write_text("the cat\n")
    base = ["features", str(tiny_model), "--input", str(tmp_path / "t.txt")]
    assert main([*base, "--out", str(tmp_path / "two.jsonl"), "--layers", "-1,-2"]) == 0
    assert main([*base, "--out", str(tmp_path / "one.jsonl"), "--layers", "-1"]) == 0
    two = np.array(json.loads((tmp_path / "two.jsonl").read_text().splitlines()[0])["features"])
    one = np.array(json.loads((tmp_path / "one.jsonl").read_text().splitlines()[0])["features"])
    assert two.shape[-1] == 2 * one.shape[-1]  # two layers concatenated


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/3: "
            "file write failed"
        ),  # torch.save on a full disk
        OSError("8192 requested and 0 written"),  # numpy's tofile/save: no errno
        __import__("sqlite3").OperationalError("database or disk is full"),  # index add
    ],
    ids=["torch-save", "numpy", "sqlite"],
)
def test_disk_full_without_an_errno_is_one_line(tmp_path, monkeypatch, capsys, error):
    from bertkit.cli import index as index_cli
    from bertkit.cli import main

    def full(args):
        raise error

    monkeypatch.setattr(index_cli, "info", full)
    assert main(["index", "info", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bertkit index: error:") and "is the disk full?" in line


def test_an_unknown_runtime_error_stays_a_traceback(tmp_path, monkeypatch):
    from bertkit.cli import index as index_cli
    from bertkit.cli import main

    def bug(args):
        raise RuntimeError("shape mismatch in a matmul")

    monkeypatch.setattr(index_cli, "info", bug)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        main(["index", "info", str(tmp_path)])


def test_export_without_the_onnx_package_says_what_to_install(tmp_path, tiny_model, monkeypatch, capsys):
    import torch

    from bertkit.cli import main

    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'onnx'", name="onnx")

    monkeypatch.setattr(torch.onnx, "export", missing)  # what the exporter does where onnx is not installed
    assert main(["export", "onnx", str(tiny_model), str(tmp_path / "m.onnx")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "'onnx' package" in line and "pip install" in line
    assert list(tmp_path.iterdir()) == []
