"""What a session lent a GPU machine runs on its host CPU (``benchmarks/cpu_checks.sh``) depends on: the MiniLM
stand-in (random weights of the real names and shapes, loadable, marked as such), its refusals, the benchmarks
finding their MiniLM and data through environment variables, and ``benchmarks.run --jsonl`` writing each row
before the run ends (a time limit once left a device call with no rows at all). No timings are asserted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from benchmarks import inputs
from benchmarks import minilm_stand_in as stand_in

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cpu_checks.sh"
TINY_CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "vocab_size": 40,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "pad_token_id": 0,
}


def _tiny_files(folder: Path) -> Path:
    """A small-files folder of a tiny BERT: every required name, the config real, the rest placeholders (the
    stand-in copies them and reads only config.json)."""
    for name in stand_in.REQUIRED:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}\n", encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
    return folder


def _run_stand_in(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.minilm_stand_in", *args], cwd=ROOT, capture_output=True, text=True
    )


# ------------------------------------------------------------------------------------------- the stand-in
@pytest.fixture(scope="module")
def minilm_stand_in(minilm_dir, tmp_path_factory) -> Path:
    """The small files exported from the installed package, and the stand-in built from them (as on a device)."""
    base = tmp_path_factory.mktemp("stand-in")
    stand_in.export_files(base / "files", minilm_dir)
    return stand_in.build(base / "files", base / "minilm", seed=0)


def test_the_stand_in_has_the_real_minilm_tensor_names_dtypes_and_shapes(minilm_dir, minilm_stand_in):
    real = stand_in.manifest_of(minilm_dir / "model.safetensors")
    ours = stand_in.manifest_of(minilm_stand_in / "model.safetensors")
    assert ours["tensors"] == real["tensors"]
    assert ours["metadata"]["format"] == "pt"  # what transformers asks before it loads a safetensors file
    # the small files are the real ones, byte for byte
    for name in ("config.json", "vocab.txt", "tokenizer.json", "modules.json", "1_Pooling/config.json"):
        assert (minilm_stand_in / name).read_bytes() == (minilm_dir / name).read_bytes(), name
    # and the weights are not: a stand-in never passes for the real model
    from safetensors import safe_open

    with (
        safe_open(str(minilm_stand_in / "model.safetensors"), "pt") as a,
        safe_open(str(minilm_dir / "model.safetensors"), "pt") as b,
    ):
        key = "encoder.layer.0.attention.self.query.weight"
        assert not torch.equal(a.get_tensor(key), b.get_tensor(key))


def test_the_stand_in_loads_in_bertkit_and_transformers_with_minilm_shapes(minilm_stand_in):
    from bertkit.model import BertModel
    from bertkit.sentence.encoder import SentenceEncoder
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(minilm_stand_in)
    batch = tok(["a short one", "and a somewhat longer sentence here"])
    model = BertModel.from_pretrained(minilm_stand_in)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    assert hidden.shape == (2, batch["input_ids"].shape[1], 384) and torch.isfinite(hidden).all()
    vectors = SentenceEncoder.from_pretrained(minilm_stand_in).encode(["one", "two", "three"])
    assert vectors.shape == (3, 384)
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertModel.from_pretrained(str(minilm_stand_in)).eval()
    with torch.no_grad():
        ref = theirs(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (ref - hidden).abs()[real].max() < 1e-4  # the same weights, read the same way by both


def test_rows_on_the_stand_in_say_so_and_the_env_var_picks_it(minilm_stand_in, monkeypatch):
    monkeypatch.setenv(inputs.MINILM_ENV, str(minilm_stand_in))
    assert inputs.minilm_dir() == minilm_stand_in
    assert inputs.minilm_weights() == inputs.STAND_IN
    record = inputs.minilm_record()
    assert record["weights"] == inputs.STAND_IN and record["stand_in"]["seed"] == 0
    monkeypatch.delenv(inputs.MINILM_ENV)
    assert inputs.minilm_weights() == inputs.REAL  # the installed package


def test_a_minilm_folder_without_weights_is_no_data(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.setenv(inputs.MINILM_ENV, str(tmp_path))
    with pytest.raises(inputs.NoData, match="model.safetensors"):
        inputs.minilm_dir()
    assert inputs.minilm_record()["weights"] == "absent"


def test_a_tiny_stand_in_is_built_checked_against_its_manifest_and_loads(tmp_path):
    """Without the MiniLM package: the same path on a tiny config, the manifest check included."""
    from bertkit.model import BertModel

    files = _tiny_files(tmp_path / "files")
    state = stand_in.random_state(files, seed=3)
    manifest = {
        "tensors": {
            k: {"dtype": "I64" if v.dtype == torch.int64 else "F32", "shape": list(v.shape)}
            for k, v in state.items()
        }  # fmt: skip
    }
    (files / stand_in.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    out = stand_in.build(files, tmp_path / "model", seed=3)
    assert not (out / stand_in.MANIFEST).exists()  # the export's record stays out of the model folder
    assert json.loads((out / inputs.STAND_IN_MARKER).read_text())["checked_against_manifest"] is True
    umask = os.umask(0o022)
    os.umask(umask)
    for path in (
        out,
        out / "model.safetensors",
        out / "config.json",
    ):  # an ordinary folder, not a private one
        assert path.stat().st_mode & 0o777 == (0o777 if path.is_dir() else 0o666) & ~umask, path
    model = BertModel.from_pretrained(out)
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([[2, 5, 7, 3]])).last_hidden_state
    assert hidden.shape == (1, 4, 32)
    # the same seed gives the same weights; the random init is BERT's (LayerNorm 1, biases 0)
    again = stand_in.random_state(files, seed=3)
    assert all(torch.equal(state[k], again[k]) for k in state)
    assert torch.equal(state["embeddings.LayerNorm.weight"], torch.ones(32))
    assert torch.equal(state["encoder.layer.0.output.dense.bias"], torch.zeros(32))


def test_a_stand_in_that_differs_from_the_manifest_is_refused(tmp_path):
    files = _tiny_files(tmp_path / "files")
    state = stand_in.random_state(files, seed=0)
    tensors = {k: {"dtype": "I64" if v.dtype == torch.int64 else "F32", "shape": list(v.shape)}
               for k, v in state.items()}  # fmt: skip
    tensors["pooler.dense.weight"]["shape"] = [32, 16]
    (files / stand_in.MANIFEST).write_text(json.dumps({"tensors": tensors}), encoding="utf-8")
    done = _run_stand_in("--files", str(files), "--out", str(tmp_path / "model"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "pooler.dense.weight" in done.stderr
    assert not (tmp_path / "model").exists()


def test_a_non_empty_out_is_refused_unless_overwrite(tmp_path):
    files = _tiny_files(tmp_path / "files")
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    done = _run_stand_in("--files", str(files), "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--overwrite" in done.stderr and str(out) in done.stderr
    assert (out / "keep.txt").read_text() == "mine" and not (out / "model.safetensors").exists()
    done = _run_stand_in("--files", str(files), "--out", str(out), "--overwrite")
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").is_file() and not (out / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left beside it


def test_a_missing_small_file_is_named_in_one_line(tmp_path):
    files = _tiny_files(tmp_path / "files")
    (files / "vocab.txt").unlink()
    done = _run_stand_in("--files", str(files), "--out", str(tmp_path / "model"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "vocab.txt" in done.stderr


def test_export_copies_the_small_files_and_the_manifest_but_no_weights(tmp_path):
    from safetensors.torch import save_file

    source = _tiny_files(tmp_path / "minilm")
    save_file({"w": torch.zeros(3, 2), "ids": torch.arange(4)}, str(source / "model.safetensors"))
    (source / "onnx").mkdir()
    (source / "onnx" / "model.onnx").write_bytes(b"x")
    dest = tmp_path / "files"
    names = stand_in.export_files(dest, source)
    assert set(names) == {*stand_in.REQUIRED, stand_in.MANIFEST}
    assert not list(dest.rglob("*.safetensors")) and not list(dest.rglob("*.onnx"))
    manifest = json.loads((dest / stand_in.MANIFEST).read_text())
    assert manifest["tensors"] == {
        "ids": {"dtype": "I64", "shape": [4]},
        "w": {"dtype": "F32", "shape": [3, 2]},
    }
    with pytest.raises(stand_in.StandInError, match="not empty"):
        stand_in.export_files(dest, source)


# ----------------------------------------------------------------------------------------- streaming rows
def _fake_suite(jsonl: Path, seen: list, fail: bool = False) -> types.ModuleType:
    """A suite whose second row is made only after it has looked for its first row in the JSONL file."""
    module = types.ModuleType("benchmarks.bench_encoder")

    def run(args):
        seen.append(("args", getattr(args, "batches", None)))
        yield {"name": "fake row 1", "ratio": 2.0, "unit": "seq"}
        seen.append(("file", [json.loads(line) for line in jsonl.read_text().splitlines()]))
        if fail:
            raise RuntimeError("broke after one row")
        yield {"name": "fake row 2", "ratio": 3.0, "unit": "seq"}

    module.run = run
    return module


@pytest.fixture
def run_in_process(tmp_path, monkeypatch):
    """benchmarks.run's main in this process, its environment changes undone afterwards, the GEMM peaks read
    from a file instead of measured."""
    from benchmarks import run

    for name in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TRANSFORMERS_VERBOSITY",
                 "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):  # fmt: skip
        monkeypatch.setenv(name, "1")
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps({"environment": {"gemm_peak": {"fp32": {"flops_per_s": 1e11}}}}))
    threads = torch.get_num_threads()
    yield lambda *argv: run.main([*argv, "--threads", "1", "--peaks-from", str(peaks)])
    torch.set_num_threads(threads)


def test_run_jsonl_has_each_row_before_the_suite_makes_the_next(tmp_path, monkeypatch, run_in_process):
    jsonl, seen = tmp_path / "rows.jsonl", []
    monkeypatch.setitem(sys.modules, "benchmarks.bench_encoder", _fake_suite(jsonl, seen))
    rc = run_in_process("--only", "encoder", "--jsonl", str(jsonl), "--out", str(tmp_path / "r.json"),
                        "--set", "encoder.batches=3")  # fmt: skip
    assert rc == 0
    assert seen[0] == ("args", 3)  # --set reached the suite
    written = seen[1][1]
    assert (
        "environment" in written[0] and written[0]["environment"]["gemm_peak"]["fp32"]["flops_per_s"] == 1e11
    )
    assert [r["name"] for r in written[1:]] == ["fake row 1"] and written[1]["suite"] == "encoder"
    assert "minilm" in written[0]["environment"]  # which MiniLM the run had
    final = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r.get("name") for r in final[1:3]] == ["fake row 1", "fake row 2"]
    assert final[-1]["end"]["complete"] is True and final[-1]["end"]["rows"] == 2


def test_rows_before_a_suite_breaks_are_kept_with_its_error(tmp_path, monkeypatch, run_in_process):
    jsonl, seen = tmp_path / "rows.jsonl", []
    monkeypatch.setitem(sys.modules, "benchmarks.bench_encoder", _fake_suite(jsonl, seen, fail=True))
    rc = run_in_process("--only", "encoder", "--jsonl", str(jsonl), "--out", str(tmp_path / "r.json"))
    assert rc == 1
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()][1:-1]
    assert rows[0]["name"] == "fake row 1"
    assert rows[1]["suite"] == "encoder" and "broke after one row" in rows[1]["error"]
    assert len(json.loads((tmp_path / "r.json").read_text())["results"]) == 2


def test_bad_set_values_are_refused():
    from benchmarks.run import parse_overrides

    assert parse_overrides(['pretrain.sizes=["mini"]', "data.quick=true", "encoder.models=minilm"]) == {
        "pretrain": {"sizes": ["mini"]},
        "data": {"quick": True},
        "encoder": {"models": "minilm"},
    }
    for bad in ("pretrain=3", "nosuch.key=1", "pretrain.sizes"):
        with pytest.raises(ValueError):
            parse_overrides([bad])


# ---------------------------------------------------------------------------------------------- the script
def test_cpu_checks_script_parses_and_fits_one_device_call():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    text = SCRIPT.read_text(encoding="utf-8")
    budgets = [int(b) for b in re.findall(r"^step \S+ (\d+) ", text, flags=re.M)]
    assert len(budgets) >= 7 and sum(budgets) <= 560  # a ~570 s command: one device call of at most 600 s
    assert (
        re.search(r"CPU_CHECKS_TOTAL:-(\d+)", text)
        and int(re.search(r"CPU_CHECKS_TOTAL:-(\d+)", text)[1]) <= 570
    )
    command = re.search(r"command: (.+)", text)[1]
    assert len(command) <= 2000 and "$OUT" in command
    for suite in ("pretrain", "encoder", "tokenizer", "finetune", "data", "embed_train"):
        assert re.search(rf"^step {suite} \d+ .*--only {suite}\b", text, flags=re.M), suite
