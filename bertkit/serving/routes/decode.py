"""POST /decode (TEI's): token ids back to text, one string per sequence."""

from typing import Any

from ..errors import validation
from ..limits import check_budget, check_count
from ..service import InferenceService


def decode(svc: InferenceService, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
    """One string per sequence of ``ids``; ids outside the vocabulary are refused."""
    if not ids:
        raise validation("ids must hold at least one sequence")
    check_count(len(ids), "ids", "sequences", svc.limits)
    check_budget(sum(len(x) for x in ids), svc.limits)
    vocab = len(svc.tokenizer)
    for i, seq in enumerate(ids):
        bad = next((t for t in seq if not 0 <= t < vocab), None)
        if bad is not None:
            raise validation(f"ids[{i}] holds token id {bad}; this model's ids are 0..{vocab - 1}")
    with svc.tok_lock:
        return [svc.tokenizer.decode(x, skip_special_tokens=skip_special_tokens) for x in ids]


def handler(svc: InferenceService) -> Any:
    from ._http import Request

    class DecodeRequest(Request):
        ids: list[int] | list[list[int]]  # one sequence or several
        skip_special_tokens: bool = True

    def decode_route(req: DecodeRequest) -> list[str]:
        ids = req.ids
        seqs = ids if ids and isinstance(ids[0], list) else ([ids] if ids else [])
        return decode(svc, seqs, req.skip_special_tokens)

    return decode_route
