"""The environment for a child process a test compares with this one (a run killed and resumed, two DDP ranks
against one process, a real ``bertkit`` command).

    from children import child_env
    subprocess.run([...], env=child_env())

A child must compute as this process does: one thread (as ``tests/conftest.py`` sets here), this checkout
first on the path, no DDP variables, and this process's fp32 GEMM backend pinned (``BERTKIT_ONEDNN``), with
how it ran bf16 attention where it has (``BERTKIT_BF16_ATTENTION``). The ways round differently, and where
they measure alike the per-machine choice can fall either way in a child, e.g. when this process chose under
another test's cache folder.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` with the settings above, then ``extra``."""
    from bertkit.kernels.attention import bf16_attention_chosen
    from bertkit.kernels.gemm import backend_name

    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
        BERTKIT_ONEDNN="1" if backend_name() == "onednn" else "0",
    )
    if bf16_attention_chosen() is not None:
        env["BERTKIT_BF16_ATTENTION"] = bf16_attention_chosen()
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(k, None)
    env.update(extra)
    return env
