"""POST /fill-mask: a masked-LM's top candidates for every mask token of a text."""

from typing import Any

from ...inference_precision import inference_autocast
from ..errors import too_large, validation
from ..limits import check_budget, check_fill_mask, check_text, truncated_tokens
from ..service import InferenceService
from . import require


def fill_mask(svc: InferenceService, text: str, top_k: int = 5) -> list[list[dict[str, Any]]]:
    """Per mask, ``top_k`` candidates; runs the float model directly (not batched, not int8)."""
    from ...heads.pretraining import fill_mask as predict_masks

    require(svc, "/fill-mask")
    check_text(text, "text", svc.limits)
    vocab = len(svc.tokenizer)
    if not 1 <= top_k <= vocab:
        raise validation(f"top_k must be in 1..{vocab} (the vocabulary size), got {top_k}")
    mask = svc.tokenizer.mask_token
    if mask not in text:
        raise validation(f"text must contain at least one {mask} token")
    check_fill_mask(text.count(mask), top_k, svc.limits)
    check_budget(truncated_tokens(len(text), svc.max_seq_length), svc.limits)
    with svc.tok_lock:
        n = len(svc.tokenizer.encode(text).ids)
        if n > svc.max_seq_length:
            raise too_large(f"text is {n} tokens long; this model takes at most {svc.max_seq_length}")
        with inference_autocast(svc.precision, svc.device):
            return predict_masks(svc.model, svc.tokenizer, text, top_k=top_k)


def handler(svc: InferenceService) -> Any:
    from ._http import Request

    class FillMaskRequest(Request):
        text: str
        top_k: int = 5

    def fill_mask_route(req: FillMaskRequest) -> dict[str, Any]:
        return {"masks": fill_mask(svc, req.text, req.top_k)}

    return fill_mask_route
