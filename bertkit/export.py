"""Export a model directory to ONNX with dynamic batch and sequence axes.

bertkit's own forward packs the real tokens of a padded batch (shapes that depend on the data),
which a traced graph cannot express. The export therefore traces the model itself under the reference
ops (:func:`bertkit.kernels.reference_ops`): the textbook padded computation, masked attention and no
branch on the inputs' values (:class:`BertGraph`). The exported graph is checked against the model's
own forward, packed path included, with onnxruntime when it is installed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .errors import UserError
from .kernels import reference_ops

logger = logging.getLogger("bertkit")

INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]


def load_model(model_dir: str | os.PathLike, encoder_only: bool = False) -> nn.Module:
    """Load a directory as the class its config names (or just the encoder)."""
    from .architectures import load_config, load_encoder, model_class

    if encoder_only:
        return load_encoder(model_dir).eval()
    arch = (load_config(model_dir).architectures or [None])[0]
    return model_class(arch, model_dir).from_pretrained(model_dir).eval()


# each class's outputs, in the graph's order (attributes of its forward's output)
OUTPUTS = {
    "BertModel": ["last_hidden_state", "pooler_output"],
    "BertForSequenceClassification": ["logits"],
    "BertForTokenClassification": ["logits"],
    "BertForQuestionAnswering": ["start_logits", "end_logits"],
    "BertForMaskedLM": ["logits"],
    "BertForPreTraining": ["prediction_logits", "seq_relationship_logits"],
    "ModernBertModel": ["last_hidden_state"],
    "ModernBertForMaskedLM": ["logits"],
    "ModernBertForSequenceClassification": ["logits"],
    "ModernBertForTokenClassification": ["logits"],
    "ModernBertForQuestionAnswering": ["start_logits", "end_logits"],
}


class BertGraph(nn.Module):
    """A BERT or ModernBERT model (encoder or head class) as the tracer takes it: its own forward, called
    with the inputs of :attr:`input_names` in order (ModernBERT and RoBERTa have no segment ids), returning its outputs as
    a tuple (names: :meth:`output_names`).

    Traced under the reference ops (:func:`bertkit.kernels.reference_ops`), the forward is the padded,
    masked computation, with no branch on the inputs' values, so the graph holds for any batch and length
    (ModernBERT's local layers attend block by block there too, in memory linear in T; its global layers'
    scores are [T, T] in ONNX Runtime, as in any opset-17 attention).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.kind = type(model).__name__
        # no segment ids where the model has one segment type or none (ModernBERT, RoBERTa checkpoints): the
        # traced graph would drop the unused input anyway
        one_segment = self.kind.startswith("ModernBert") or getattr(model.config, "type_vocab_size", 2) == 1
        self.input_names = INPUT_NAMES[:2] if one_segment else INPUT_NAMES
        if self.kind.endswith("ForMultipleChoice"):
            raise UserError(f"ONNX export of {self.kind} is not supported; use --head encoder")
        if self.kind not in OUTPUTS:
            raise UserError(f"ONNX export of {self.kind} is not supported")
        if self.kind == "BertForTokenClassification" and getattr(model, "crf", None) is not None:
            logger.warning("the CRF layer is not exported; the graph outputs the emission logits")

    def output_names(self) -> list[str]:
        names = OUTPUTS[self.kind]
        if self.kind == "BertModel" and self.model.pooler is None:
            return names[:1]
        return names

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        """The inputs of :attr:`input_names`, each [B, T] -> the outputs of :meth:`output_names`."""
        out = self.model(**dict(zip(self.input_names, inputs)))
        return tuple(getattr(out, name) for name in self.output_names())


def reference_outputs(model: nn.Module, inputs: dict[str, Tensor]) -> list[np.ndarray]:
    """The model's own forward (packed path included), in the graph's output order."""
    with torch.no_grad():
        out = model(**inputs)
    res = [getattr(out, name, None) for name in OUTPUTS.get(type(model).__name__, ["logits"])]
    return [r.float().numpy() for r in res if r is not None]  # (a BertModel without a pooler: none there)


def _example_inputs(vocab_size: int, batch: int, seq: int, seed: int = 0) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, max(vocab_size, 6), (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for i in range(1, batch):  # different lengths: padding in every row but the first
        mask[i, max(1, seq - 2 * i) :] = 0
    ids = ids.masked_fill(mask == 0, 0)
    types = torch.zeros(batch, seq, dtype=torch.long)
    types[:, seq // 2 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}


def _real(r: np.ndarray, g: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two outputs at the real tokens only when they are per-token (padded positions carry no meaning)."""
    if r.ndim >= 2 and r.shape[:2] == mask.shape:
        sel = mask.astype(bool)
        return r[sel], g[sel]
    return r, g


def max_abs_diff(
    ref: list[np.ndarray], got: list[np.ndarray], mask: np.ndarray, names: list[str]
) -> dict[str, float]:
    """Largest difference per output, over real tokens only for per-token outputs."""
    diffs = {}
    for name, r, g in zip(names, ref, got):
        r, g = _real(r, g, mask)
        diffs[name] = float(np.max(np.abs(r - g))) if r.size else 0.0
    return diffs


def min_cosines(
    ref: list[np.ndarray], got: list[np.ndarray], mask: np.ndarray, names: list[str]
) -> dict[str, float]:
    """Smallest cosine between matching output vectors (last axis), over real tokens for per-token outputs."""
    out = {}
    for name, r, g in zip(names, ref, got):
        r, g = _real(r, g, mask)
        r, g = r.reshape(-1, r.shape[-1]), g.reshape(-1, g.shape[-1])
        num = (r * g).sum(-1)
        den = np.linalg.norm(r, axis=-1) * np.linalg.norm(g, axis=-1) + 1e-12
        out[name] = float((num / den).min()) if r.size else 1.0
    return out


# Opsets the TorchScript-based exporter writes this model in: 14 brings the attention ops it uses, 20 is that
# exporter's newest.
MIN_OPSET, MAX_OPSET = 14, 20


def export_onnx(
    model_dir: str | os.PathLike,
    out: str | os.PathLike,
    opset: int = 17,
    encoder_only: bool = False,
    verify: bool = True,
    atol: float = 1e-4,
    int8: bool = False,
    int8_min_cosine: float = 0.8,
) -> dict[str, Any]:
    """Write ``out`` (atomically) and, if onnxruntime is importable, check it against PyTorch.

    ``int8=True`` writes onnxruntime's dynamic int8 quantisation of the graph (int8 weights of the MatMul
    and Gemm nodes, activations quantised at run time) instead of the float graph, checked against PyTorch
    by direction: every output vector's cosine with PyTorch's at least ``int8_min_cosine`` (a check that the
    graph is sound, not of its quality: quantisation moves values, so an absolute tolerance would be
    meaningless; measure a task metric for quality)."""
    from .io import atomic_write

    out = Path(out)
    if out.suffix != ".onnx":
        raise UserError(f"{out}: the output file must end in .onnx")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UserError(f"--opset {opset}: the exporter writes opsets {MIN_OPSET}..{MAX_OPSET}")
    model = load_model(model_dir, encoder_only=encoder_only)
    wrapper = BertGraph(model).eval()
    names = wrapper.output_names()
    example = _example_inputs(model.config.vocab_size, 2, 8)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in wrapper.input_names}
    for name in names:
        dynamic[name] = (
            {0: "batch"}
            if name in ("pooler_output", "seq_relationship_logits")
            or (name == "logits" and wrapper.kind.endswith("ForSequenceClassification"))
            else {0: "batch", 1: "sequence"}
        )
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.export.tmp")
    try:
        # The TorchScript-based exporter (dynamo=False) handles dynamic_axes without extra packages
        # (the torch.export-based one needs onnxscript); its deprecation notice is silenced here.
        # the reference ops: no packing, no custom GEMM, the padded batch with its mask
        with torch.no_grad(), reference_ops(), warnings.catch_warnings(), _needs_export_packages():
            warnings.simplefilter("ignore", DeprecationWarning)
            # the forward's check of the length against max_position_embeddings reads a traced size: the
            # tracer warns that it freezes the example's answer, which is right for any length the graph
            # takes (the positions table is that long)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(
                wrapper,
                tuple(example[name] for name in wrapper.input_names),
                str(tmp),
                input_names=wrapper.input_names,
                output_names=names,
                dynamic_axes=dynamic,
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
        float_bytes = tmp.stat().st_size
        if int8:
            quantize_onnx_int8(tmp, tmp)
        with atomic_write(out, "wb") as f:  # fsync + rename: no half-written .onnx under the final name
            f.write(tmp.read_bytes())
    finally:
        tmp.unlink(missing_ok=True)
    result: dict[str, Any] = {
        "model_dir": str(model_dir),
        "out": str(out),
        "architecture": wrapper.kind,
        "inputs": wrapper.input_names,
        "outputs": names,
        "opset": opset,
        "bytes": out.stat().st_size,
        "export_seconds": round(time.perf_counter() - t0, 2),
    }
    if int8:
        result["int8"] = {"float_bytes": float_bytes, "size_ratio": round(float_bytes / result["bytes"], 3)}
    if verify:
        result["verify"] = verify_onnx(out, model, atol=atol, min_cosine=int8_min_cosine if int8 else None)
    return result


@contextlib.contextmanager
def _needs_export_packages() -> Iterator[None]:
    """A package the exporter imports on demand (onnx, onnxscript) missing: one line saying what to install."""
    try:
        yield
    except ModuleNotFoundError as e:
        raise UserError(f"export onnx needs the {e.name!r} package: pip install 'bertkit[export]'") from None


def quantize_onnx_int8(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """onnxruntime's dynamic int8 quantisation of an ONNX file (``src`` may equal ``dst``)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise UserError("--int8 needs onnxruntime: pip install 'bertkit[export]'") from None
    src, dst = Path(src), Path(dst)
    staged = dst.with_name(f".{dst.name}.int8.tmp")
    try:
        # only MatMuls with a constant (weight) operand: quantising the attention products of two
        # activations costs accuracy for little speed
        quantize_dynamic(
            str(src), str(staged), weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True}
        )
        staged.replace(dst)
    finally:
        staged.unlink(missing_ok=True)


def verify_onnx(
    path: str | os.PathLike, model: nn.Module, atol: float = 1e-4, min_cosine: float | None = None
) -> dict[str, Any]:
    """Run the ONNX file with onnxruntime on inputs of a new batch size and length (with padding) and
    compare with the PyTorch model; raise UserError beyond ``atol`` (or, with ``min_cosine``, when an output
    vector's cosine with PyTorch's falls below it: for quantised graphs)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"skipped": "onnxruntime is not installed (pip install 'bertkit[export]')"}
    wrapper = BertGraph(model)
    names = wrapper.output_names()
    inputs = _example_inputs(model.config.vocab_size, 3, 13, seed=1)
    inputs = {k: inputs[k] for k in wrapper.input_names}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(names, {k: v.numpy() for k, v in inputs.items()})
    ref = reference_outputs(model, inputs)
    diffs = max_abs_diff(ref, got, inputs["attention_mask"].numpy(), names)
    worst = max(diffs.values())
    result: dict[str, Any] = {"onnxruntime": ort.__version__, "max_abs_diff": diffs}
    if min_cosine is not None:
        cos = min_cosines(ref, got, inputs["attention_mask"].numpy(), names)
        if min(cos.values()) < min_cosine:
            raise UserError(f"{path}: int8 outputs point away from PyTorch's (cosine {cos} < {min_cosine})")
        result["min_cosine"] = cos
    elif worst > atol:
        raise UserError(f"{path}: ONNX outputs differ from PyTorch by {worst:.2e} (> {atol}): {diffs}")
    return result | {"batch": 3, "sequence": 13}


__all__ = [
    "BertGraph",
    "export_onnx",
    "load_model",
    "quantize_onnx_int8",
    "verify_onnx",
]
