"""POST /qa: extractive answers, one (question, context) or a list of them, with character offsets."""

from functools import partial
from typing import Any

from ..errors import validation
from ..limits import check_budget, check_count, check_text, windowed_tokens
from ..service import InferenceService
from . import require


def answer(
    svc: InferenceService,
    items: list[tuple[str, str]],
    doc_stride: int | None = None,
    max_answer_length: int = 30,
    handle_impossible_answer: bool = False,
    null_threshold: float = 0.0,
    field: str = "inputs",
) -> list[dict[str, Any]]:
    """One answer per (question, context); see ``pipelines.qa.answer``."""
    from ...pipelines.qa import QASettings
    from ...pipelines.qa import answer as answer_spans

    require(svc, "/qa")
    if not items:
        raise validation(f"{field} must hold at least one question")
    check_count(len(items), field, "questions", svc.limits)
    window = min(384, svc.max_seq_length)
    query = min(64, svc.max_seq_length // 4)
    if doc_stride is None:  # run_squad.py's 128, or the whole room of a smaller model's window
        doc_stride = min(128, window - query - 3)
    settings = QASettings(
        max_seq_length=window,
        doc_stride=doc_stride,
        max_query_length=query,
        max_answer_length=max_answer_length,
        version_2_with_negative=handle_impossible_answer,
        null_threshold=null_threshold,
    )
    if not 1 <= doc_stride <= settings.max_seq_length - settings.max_query_length - 3:
        raise validation(
            f"doc_stride must be in 1..{settings.max_seq_length - settings.max_query_length - 3} "
            f"(the window), got {doc_stride}"
        )
    if max_answer_length < 1:
        raise validation(f"max_answer_length must be >= 1, got {max_answer_length}")
    budget = 0
    for i, (q, c) in enumerate(items):
        name = f"{field}[{i}]" if field == "inputs" else ""
        check_text(q, f"{name}.question" if name else "question", svc.limits)
        check_text(c, f"{name}.context" if name else "context", svc.limits)
        if not q.strip() or not c.strip():
            raise validation(f"{name or 'the request'}: question and context must hold some text")
        with svc.tok_lock:  # e.g. only zero-width or control characters: the model would see nothing
            empty = [f for f, t in (("question", q), ("context", c)) if not svc.tokenizer.tokenize(t)]
        if empty:
            raise validation(
                f"{name or 'the request'}: the {empty[0]} holds no tokens (only characters the tokenizer "
                "drops, such as zero-width or control characters)"
            )
        fixed = min(len(q), settings.max_query_length) + 3
        budget += windowed_tokens(len(c), fixed, settings.max_seq_length, doc_stride)
    check_budget(budget, svc.limits)
    qs = [(str(i), q, c) for i, (q, c) in enumerate(items)]
    return answer_spans(svc.tokenizer, qs, partial(svc.batcher.submit, "span"), settings, lock=svc.tok_lock)


def handler(svc: InferenceService) -> Any:
    from ._http import Request

    class QAItem(Request):
        question: str
        context: str

    class QARequest(Request):
        question: str | None = None
        context: str | None = None
        inputs: list[QAItem] | None = None
        doc_stride: int | None = None
        max_answer_length: int = 30
        handle_impossible_answer: bool = False
        null_threshold: float = 0.0

    def qa(req: QARequest) -> Any:
        single = req.inputs is None
        if single and (req.question is None or req.context is None):
            raise validation("give question and context, or inputs: [{question, context}, ...]")
        if not single and (req.question is not None or req.context is not None):
            raise validation("give question and context, or inputs, not both")
        items = [(req.question, req.context)] if single else [(x.question, x.context) for x in req.inputs]
        answers = answer(
            svc,
            items,
            doc_stride=req.doc_stride,
            max_answer_length=req.max_answer_length,
            handle_impossible_answer=req.handle_impossible_answer,
            null_threshold=req.null_threshold,
            field="request" if single else "inputs",
        )
        for a in answers:
            a.pop("id", None)
        return answers[0] if single else answers

    return qa
