"""Checkpoint files in the Hugging Face layout: read and write state dicts, and the rename table.

Reads ``model.safetensors`` (single or sharded with ``model.safetensors.index.json``) and the older
``pytorch_model.bin``; writes ``model.safetensors`` atomically. Key names are transformers' BERT
names, so the only renames needed are the legacy LayerNorm ``gamma``/``beta`` ones.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from .errors import UserError
from .io import atomic_write, path_inside

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"

# Old checkpoints (and the TF release) call LayerNorm's weight/bias gamma/beta.
_LEGACY_RENAMES = [
    (re.compile(r"(LayerNorm|layer_norm|ln)\.gamma$"), r"\1.weight"),
    (re.compile(r"(LayerNorm|layer_norm|ln)\.beta$"), r"\1.bias"),
]


def normalize_key(key: str) -> str:
    """Map a legacy parameter name onto the current transformers name."""
    for pattern, repl in _LEGACY_RENAMES:
        key = pattern.sub(repl, key)
    return key


def checkpoint_file(model_dir: str | os.PathLike) -> Path:
    """The weights file in ``model_dir``; UserError listing what was looked for if none is there."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UserError(f"{model_dir}: model directory not found")
    for name in (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN):
        if (model_dir / name).is_file():
            return model_dir / name
    raise UserError(
        f"{model_dir}: no weights found (looked for {SAFETENSORS}, {SAFETENSORS_INDEX}, {PYTORCH_BIN}); "
        "for an original TensorFlow checkpoint run `bertkit convert tf` first"
    )


def load_state_dict(model_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint in ``model_dir``, keys normalised, on the CPU."""
    path = checkpoint_file(model_dir)
    try:
        if path.name == SAFETENSORS:
            state = load_file(str(path))
        elif path.name == SAFETENSORS_INDEX:
            index = json.loads(path.read_text(encoding="utf-8"))
            state = {}
            for shard in sorted(set(index["weight_map"].values())):
                state.update(load_file(str(path_inside(path.parent, shard, str(path)))))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except UserError:
        raise
    except Exception as e:  # corrupt or truncated files surface as many error types
        raise UserError(f"{path}: cannot read the weights ({type(e).__name__}: {e})") from None
    return {normalize_key(k): v for k, v in state.items()}


def save_state_dict(state: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Write ``state`` as safetensors atomically (tensors made contiguous and unshared)."""
    tensors = {k: v.detach().contiguous().cpu().clone() for k, v in state.items()}
    with atomic_write(path, "wb") as f:
        f.write(save(tensors, metadata={"format": "pt"}))
