"""Prompts of a sentence-transformers folder: texts prepended before encoding (E5/BGE-style ``query: ``).

A folder's ``config_sentence_transformers.json`` may hold ``prompts`` (name -> text) and
``default_prompt_name`` (applied when a caller names no prompt). A caller picks one by name
(``prompt_name``) or gives the text itself (``prompt``, which wins), as ``SentenceTransformer.encode`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError
from .io import read_json_object

CONFIG_NAME = "config_sentence_transformers.json"


@dataclass(frozen=True)
class Prompts:
    prompts: dict[str, str] = field(default_factory=dict)
    default_name: str | None = None
    # a Pooling module with include_prompt: false leaves the prompt's tokens out of the mean (INSTRUCTOR
    # style); bertkit's pooling does not, so such a folder refuses prompts rather than answer differently
    include_prompt: bool = True

    @classmethod
    def from_folder(cls, model_dir: str | Path, include_prompt: bool = True) -> Prompts:
        """The folder's prompts (none when it has no config_sentence_transformers.json)."""
        path = Path(model_dir) / CONFIG_NAME
        cfg = read_json_object(path)  # {} when absent
        prompts = cfg.get("prompts") or {}
        if not isinstance(prompts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()
        ):
            raise UserError(f"{path}: prompts must map names to texts")
        default = cfg.get("default_prompt_name")
        if default is not None and default not in prompts:
            raise UserError(f"{path}: default_prompt_name {default!r} is not one of its prompts")
        return cls(dict(prompts), default, include_prompt)

    def text(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
        """The text to prepend: ``prompt`` itself, else the named prompt, else the default one, else ""."""
        if prompt is not None:
            return prompt
        if prompt_name is None:
            return self.prompts[self.default_name] if self.default_name else ""
        if prompt_name not in self.prompts:
            have = ", ".join(sorted(self.prompts)) or "none"
            raise UserError(f"prompt_name {prompt_name!r} is not one of this model's prompts ({have})")
        return self.prompts[prompt_name]

    def apply(self, texts: list[str], prompt_name: str | None = None, prompt: str | None = None) -> list[str]:
        pre = self.text(prompt_name, prompt)
        if pre and not self.include_prompt:
            raise UserError(
                "this folder's Pooling module excludes prompt tokens (include_prompt: false), which bertkit "
                "does not implement: send texts without a prompt"
            )
        return [pre + t for t in texts] if pre else list(texts)


__all__ = ["CONFIG_NAME", "Prompts"]
