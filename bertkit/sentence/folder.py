"""The sentence-transformers folder, read without sentence-transformers installed and written so that
``SentenceTransformer(dir)`` loads it as is::

    config.json, model.safetensors, vocab.txt, tokenizer_config.json   the Transformer module (folder root)
    sentence_bert_config.json                                         max_seq_length, do_lower_case
    modules.json                                                      Transformer, Pooling, [Dense], [Normalize]
    1_Pooling/config.json   [2_Dense/{config.json, model.safetensors}]   [N_Normalize/]

Reading also takes folders sentence-transformers >= 5 saved (the length limit as the tokenizer's
``model_max_length``) and >= 6 (one ``pooling_mode`` key in the Pooling config).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import atomic_dir, atomic_write_json, path_inside, read_json
from ..pooling import POOLING_MODES
from .dense import Dense

# Keys of a sentence-transformers Pooling config.json <-> our pooling names (reading: the first true one wins).
_ST_POOLING_KEYS = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
    ("pooling_mode_mean_tokens", "mean"),
)


@dataclass
class Layout:
    """What a folder's ``modules.json`` and its modules' configs say."""

    transformer_dir: Path
    pooling: str | None = None
    normalize: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # sentence_bert_config.json
    dense: list[Dense] = field(default_factory=list)
    include_prompt: bool = True  # whether pooling includes a prompt's tokens


def _pooling_mode(cfg_file: Path, cfg: dict[str, Any]) -> str:
    for key, name in _ST_POOLING_KEYS:
        if cfg.get(key):
            return name
    # sentence-transformers >= 6 writes one "pooling_mode" (a name or a list of names)
    new = cfg.get("pooling_mode")
    new = new[0] if isinstance(new, list) and len(new) == 1 else new
    mode = {"mean_sqrt_len_tokens": "mean_sqrt_len"}.get(new, new) if isinstance(new, str) else None
    if mode not in POOLING_MODES:
        raise UserError(f"{cfg_file}: no supported pooling mode set (supported: {POOLING_MODES})")
    return mode


def read_layout(model_dir: Path) -> Layout:
    """The layout of a sentence-transformers folder (one with a ``modules.json``)."""
    modules = read_json(model_dir / "modules.json")
    if not isinstance(modules, list):
        raise UserError(f"{model_dir / 'modules.json'}: expected a list of modules")
    out = Layout(model_dir)
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = path_inside(model_dir, module.get("path", ""), str(model_dir / "modules.json"))
        if kind == "Transformer":
            out.transformer_dir = path
        elif kind == "Pooling":
            cfg_file = path / "config.json"
            if cfg_file.is_file():
                cfg = read_json(cfg_file)
                out.include_prompt = cfg.get("include_prompt", True) is not False
                out.pooling = _pooling_mode(cfg_file, cfg)
        elif kind == "Normalize":
            out.normalize = True
        elif kind == "Dense":
            out.dense.append(Dense.load(path))
        else:
            raise UserError(
                f"{model_dir / 'modules.json'}: module type {module.get('type')!r} is not supported "
                "(bertkit reads Transformer, Pooling, Dense and Normalize modules)"
            )
    for candidate in (out.transformer_dir, model_dir):
        if (candidate / "sentence_bert_config.json").is_file():
            out.config = read_json(candidate / "sentence_bert_config.json")
            break
    return out


def write_folder(encoder: Any, out_dir: str | os.PathLike) -> Path:
    """Write ``encoder`` (a :class:`~bertkit.sentence.encoder.SentenceEncoder`) as a sentence-transformers
    folder, atomically: a temp dir renamed into place."""
    out_dir = Path(out_dir)
    if out_dir.is_dir():  # replacing a saved model: its sub-folders cannot be renamed over
        shutil.rmtree(out_dir)
    with atomic_dir(out_dir) as tmp:
        encoder.model.save_pretrained(tmp)
        encoder.tokenizer.save_pretrained(tmp)
        atomic_write_json(
            tmp / "sentence_bert_config.json",
            {"max_seq_length": encoder.max_seq_length, "do_lower_case": encoder.lowercase_input},
        )
        pooling_cfg: dict[str, Any] = {"word_embedding_dimension": encoder.model.config.hidden_size}
        for key, mode in _ST_POOLING_KEYS[::-1]:  # the order sentence-transformers writes them in
            pooling_cfg[key] = mode == encoder.pooling
        atomic_write_json(tmp / "1_Pooling" / "config.json", pooling_cfg)
        kinds = ["Transformer", "Pooling"]
        for d in encoder.dense:
            d.save(tmp / f"{len(kinds)}_Dense")
            kinds.append("Dense")
        if encoder.normalize:
            (tmp / f"{len(kinds)}_Normalize").mkdir()
            kinds.append("Normalize")
        paths = ["", "1_Pooling"] + [f"{i}_{k}" for i, k in enumerate(kinds) if i > 1]
        modules = [
            {"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{k}"}
            for i, (k, p) in enumerate(zip(kinds, paths))
        ]
        atomic_write_json(tmp / "modules.json", modules)
        # the similarity sentence-transformers reports with model.similarity()
        atomic_write_json(tmp / "config_sentence_transformers.json", {"similarity_fn_name": "cosine"})
    return out_dir


def read_modules(model_dir: str | os.PathLike) -> list[str]:
    """The module kinds of a saved folder, in order (for tests and reports)."""
    return [m["type"].rsplit(".", 1)[-1] for m in read_json(Path(model_dir) / "modules.json")]
