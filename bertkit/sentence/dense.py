"""sentence-transformers' ``Dense`` module, read and written in its own folder layout."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from ..errors import UserError
from ..io import atomic_write, atomic_write_json

# sentence-transformers' names of the activations a Dense module may use (nothing else is imported by name)
DENSE_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": torch.nn.Tanh,
    "torch.nn.modules.linear.Identity": torch.nn.Identity,
    "torch.nn.modules.activation.ReLU": torch.nn.ReLU,
    "torch.nn.modules.activation.GELU": torch.nn.GELU,
    "torch.nn.modules.activation.Sigmoid": torch.nn.Sigmoid,
}
TANH = "torch.nn.modules.activation.Tanh"


class Dense(torch.nn.Module):
    """``activation(linear(x))``, [B, in] -> [B, out].

    Saved as ``config.json`` (``in_features``, ``out_features``, ``bias``, ``activation_function``) and
    ``model.safetensors`` (``linear.weight`` [out, in], ``linear.bias`` [out]), as sentence-transformers does."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, activation: str = TANH
    ) -> None:
        super().__init__()
        if activation not in DENSE_ACTIVATIONS:
            raise UserError(
                f"Dense activation {activation!r} is not supported (supported: {', '.join(DENSE_ACTIVATIONS)})"
            )
        self.in_features, self.out_features = in_features, out_features
        self.bias, self.activation = bias, activation
        self.linear = torch.nn.Linear(in_features, out_features, bias=bias)
        self.activation_function = DENSE_ACTIVATIONS[activation]()

    @classmethod
    def seeded(cls, in_features: int, out_features: int, activation: str, seed: int) -> Dense:
        """A new layer with ``nn.Linear``'s default initialisation, drawn from a generator seeded ``seed``."""
        g = torch.Generator().manual_seed(seed)
        new = cls(in_features, out_features, activation=activation)
        bound = 1.0 / in_features**0.5
        with torch.no_grad():
            new.linear.weight.copy_(torch.rand(new.linear.weight.shape, generator=g) * 2 * bound - bound)
            new.linear.bias.copy_(torch.rand(new.linear.bias.shape, generator=g) * 2 * bound - bound)
        return new

    def forward(self, x: Tensor) -> Tensor:
        return self.activation_function(self.linear(x))

    def save(self, path: str | os.PathLike) -> None:
        from safetensors.torch import save

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "activation_function": self.activation,
        }
        atomic_write_json(path / "config.json", cfg)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        with atomic_write(path / "model.safetensors", "wb") as f:
            f.write(save(tensors))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Dense:
        """Read a Dense folder (safetensors only: a pickled ``pytorch_model.bin`` is refused)."""
        from safetensors.torch import load_file

        from ..io import read_json

        path = Path(path)
        cfg = read_json(path / "config.json") if (path / "config.json").is_file() else None
        if not isinstance(cfg, dict) or not {"in_features", "out_features"} <= set(cfg):
            raise UserError(f"{path / 'config.json'}: a Dense module needs in_features and out_features")
        if cfg.get("use_residual"):
            raise UserError(
                f"{path / 'config.json'}: a residual Dense module (use_residual) is not supported"
            )
        if not (path / "model.safetensors").is_file():
            raise UserError(
                f"{path}: Dense weights must be in model.safetensors (bertkit does not unpickle "
                "pytorch_model.bin; re-save the model with a recent sentence-transformers)"
            )
        dense = cls(
            int(cfg["in_features"]),
            int(cfg["out_features"]),
            bool(cfg.get("bias", True)),
            cfg.get("activation_function", TANH),
        )
        try:
            dense.load_state_dict(load_file(str(path / "model.safetensors")))
        except RuntimeError as e:
            raise UserError(f"{path / 'model.safetensors'}: weights do not match config.json ({e})") from None
        return dense
