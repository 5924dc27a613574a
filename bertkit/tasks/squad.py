"""SQuAD v1.1 / v2.0 reading and feature creation, following the original BERT release's algorithm.

Reading (:func:`read_squad_examples`)
    The context is split into words on whitespace (space, tab, CR, LF and U+202F) and every character
    gets the index of the word it belongs to (whitespace: the preceding word, -1 before the first).
    For training, the answer's character span is mapped to a word span. Two kinds of bad answers:

    * the answer text is not the context's text at ``answer_start`` (or the offset is outside the
      context, or the text is empty): the file is broken -> :class:`~bertkit.errors.UserError` naming the
      file, article, question id and field;
    * the text is at its offset but the whitespace words of that span do not contain the answer's
      whitespace-normalised text (weird Unicode; the original's check): the question is skipped with a
      warning and counted in ``ReadStats.skipped`` (the original release's behaviour).

    Departure from the original, needed because the shared data has only dev files, which carry several
    answers per question: for training the FIRST answer is used (the original required exactly one).
    v2.0: ``is_impossible`` (absent -> "has no answers") marks a question without an answer.

Features (:func:`convert_examples_to_features`)
    The question is WordPiece-tokenised and cut to ``max_query_length`` tokens; every context word is
    tokenised on its own (``tokenizer.tokenize(word)``, cached per distinct word) with maps between word
    and sub-token indices; the answer's sub-token span is refined by :func:`improve_answer_span`.
    The document is cut into windows of at most ``max_seq_length - len(query) - 3`` tokens whose starts
    are ``doc_stride`` tokens apart (a step, not an overlap; the last window ends at the document's end).
    Each window becomes ``[CLS] query [SEP] window [SEP]`` with segment ids 0 for ``[CLS] query [SEP]``
    and 1 for the rest. For each window token ``token_is_max_context`` says whether this window gives it
    the most context (:func:`is_max_context`). Training targets are positions in the sequence; 0 (the
    ``[CLS]`` token) when the answer is not wholly inside the window or the question is impossible.
    Sequences are not padded here (the batcher pads with 0 and an attention mask of 0).
    A byte-level BPE tokenizer (ModernBERT's) tokenises the context whole and maps tokens to characters
    instead (:mod:`bertkit.tasks.squad_bpe`), and the special tokens and segment ids around the question and
    the window are the tokenizer's own layout of a pair (e.g. RoBERTa's ``<s> query </s></s> window </s>``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bertkit.errors import UserError
from bertkit.io import open_text
from bertkit.pair_layout import pair_layout

log = logging.getLogger("bertkit")

_WHITESPACE = frozenset(" \t\r\n\u202f")


@dataclass
class SquadExample:
    """One question on one context. ``start_position``/``end_position`` are word indices (training only;
    -1 for impossible questions, None when not computed)."""

    qas_id: str
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False
    answers: list[str] = field(default_factory=list)  # every gold text (for reference/evaluation)
    context: str = ""  # the paragraph as written (a BPE tokenizer's offsets point into it)
    answer_chars: tuple[int, int] | None = None  # training answer's characters [start, end) in ``context``


@dataclass
class SquadFeature:
    """One window of one example, ready for the model (unpadded).

    The window covers document sub-tokens ``doc_start .. doc_start + doc_length - 1`` placed at sequence
    positions ``doc_offset ..``; the maps to context words and max-context windows are shared per document
    (``orig_index``/``is_max_context`` per position, or the original's dicts via the properties), so a
    feature costs little more than its ids."""

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    doc_offset: int  # sequence position of the first window token (len(query) + 2 with [CLS] and [SEP])
    doc_start: int  # index of the window's first token among the document's sub-tokens
    doc_length: int
    tok_to_orig: Sequence[int] = field(repr=False, compare=False, default=())  # doc sub-token -> word
    max_context_window: Sequence[int] = field(
        repr=False, compare=False, default=()
    )  # doc sub-token -> window
    start_position: int | None = None  # training target (sequence position, 0 = [CLS])
    end_position: int | None = None
    is_impossible: bool = False
    # BPE tokenizers: doc sub-token -> its characters in the example's context (see squad_bpe); () otherwise
    char_spans: Sequence[tuple[int, int]] = field(repr=False, compare=False, default=())

    def orig_index(self, position: int) -> int | None:
        """Context word index of sequence ``position``; None outside the window (query, specials)."""
        j = position - self.doc_offset
        return self.tok_to_orig[self.doc_start + j] if 0 <= j < self.doc_length else None

    def char_span(self, start: int, end: int) -> tuple[int, int]:
        """BPE features: context characters ``[first, last)`` of window positions ``start..end``."""
        return (
            self.char_spans[self.doc_start + start - self.doc_offset][0],
            self.char_spans[self.doc_start + end - self.doc_offset][1],
        )

    def is_max_context(self, position: int) -> bool:
        """Whether this window is the max-context window of the token at ``position`` (False off-window)."""
        j = position - self.doc_offset
        return 0 <= j < self.doc_length and self.max_context_window[self.doc_start + j] == self.doc_span_index

    @property
    def token_to_orig_map(self) -> dict[int, int]:
        """The original's dict: sequence position -> context word index, for window tokens."""
        o, s = self.doc_offset, self.doc_start
        return {o + j: self.tok_to_orig[s + j] for j in range(self.doc_length)}

    @property
    def token_is_max_context(self) -> dict[int, bool]:
        """The original's dict: sequence position -> is this window the token's max-context window."""
        o, s, i = self.doc_offset, self.doc_start, self.doc_span_index
        return {o + j: self.max_context_window[s + j] == i for j in range(self.doc_length)}


@dataclass
class ReadStats:
    examples: int = 0
    skipped: int = 0  # answers not recoverable from the whitespace words (original: skipped with a warning)
    impossible: int = 0


def split_context(text: str) -> tuple[list[str], list[int]]:
    """Whitespace words of ``text`` and, for every character, the index of its word."""
    words: list[str] = []
    char_to_word: list[int] = []
    prev_ws = True
    for c in text:
        if c in _WHITESPACE:
            prev_ws = True
        else:
            if prev_ws:
                words.append(c)
            else:
                words[-1] += c
            prev_ws = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def load_squad_json(path_or_data: Any) -> dict:
    """The SQuAD file's top-level object, from a path or an already-loaded dict; clear errors when bad."""
    if isinstance(path_or_data, dict):
        data = path_or_data
        name = "<data>"
    else:
        name = os.fspath(path_or_data)
        try:
            with open_text(name, "SQuAD file") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise UserError(f"{name}: SQuAD file not found") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{name}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f"{name}: not a SQuAD file: expected a JSON object with a 'data' list of articles")
    if not data["data"]:
        raise UserError(f"{name}: the 'data' list is empty (no articles)")
    return data


def read_squad_examples(
    path_or_data: Any, is_training: bool, version_2_with_negative: bool = False, name: str | None = None
) -> tuple[list[SquadExample], ReadStats]:
    """Read a SQuAD JSON file (path or loaded dict) into examples; see the module docstring for rules.
    ``name``: the file a loaded dict came from, for error messages."""
    data = load_squad_json(path_or_data)
    name = name or ("<data>" if isinstance(path_or_data, dict) else os.fspath(path_or_data))
    stats = ReadStats()
    examples: list[SquadExample] = []
    seen: set[Any] = set()  # predictions are keyed by question id: two questions may not share one
    for a_index, article in enumerate(data["data"]):
        title = article.get("title", f"#{a_index}")
        for p_index, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{name}: article {title!r} paragraph {p_index}"
            if "context" not in paragraph or "qas" not in paragraph:
                raise UserError(f"{where}: missing field 'context' or 'qas'")
            context = paragraph["context"]
            if not isinstance(context, str) or not isinstance(paragraph["qas"], list):
                raise UserError(f"{where}: 'context' must be a string and 'qas' a list")
            doc_tokens, char_to_word = split_context(context)
            for qa in paragraph["qas"]:
                qid = qa.get("id") if isinstance(qa, dict) else None
                if qid is None or "question" not in qa:
                    raise UserError(f"{where}: a question lacks its 'id' or 'question' field")
                if not isinstance(qa["question"], str):
                    raise UserError(
                        f"{where} question {qid!r}: 'question' must be a string, got "
                        f"{json.dumps(qa['question'])[:40]}"
                    )
                if not isinstance(qid, (str, int)) or isinstance(qid, bool):
                    raise UserError(f"{where}: question id {json.dumps(qid)[:40]} must be a string")
                if qid in seen:
                    raise UserError(
                        f"{where}: question id {qid!r} appears twice (predictions are keyed by id)"
                    )
                seen.add(qid)
                answers = qa.get("answers", [])
                if version_2_with_negative:
                    is_impossible = bool(qa.get("is_impossible", not answers))
                else:
                    is_impossible = False
                example = SquadExample(
                    qas_id=qid,
                    question_text=qa["question"],
                    doc_tokens=doc_tokens,
                    is_impossible=is_impossible,
                    answers=[a["text"] for a in answers],
                    context=context,
                )
                if is_training:
                    if is_impossible:
                        example.start_position = example.end_position = -1
                        example.orig_answer_text = ""
                    else:
                        if not answers:
                            raise UserError(
                                f"{where} question {qid!r}: 'answers' is empty; for SQuAD v1.1 every "
                                "question needs an answer (use --version 2.0 for unanswerable questions)"
                            )
                        start, end = _answer_word_span(
                            answers[0], context, char_to_word, f"{where} question {qid!r}"
                        )
                        actual = " ".join(doc_tokens[max(start, 0) : end + 1])
                        cleaned = " ".join(answers[0]["text"].split())
                        if start < 0 or actual.find(cleaned) == -1:
                            log.warning(
                                "SQuAD %s: could not find answer %r in %r; skipped", qid, cleaned, actual
                            )
                            stats.skipped += 1
                            continue
                        example.orig_answer_text = answers[0]["text"]
                        offset = answers[0]["answer_start"]
                        example.answer_chars = (offset, offset + len(example.orig_answer_text))
                        example.start_position, example.end_position = start, end
                stats.impossible += int(is_impossible)
                examples.append(example)
    stats.examples = len(examples)
    if stats.skipped:
        log.warning("SQuAD %s: %d questions skipped (answer not recoverable from words)", name, stats.skipped)
    return examples, stats


def _answer_word_span(answer: dict, context: str, char_to_word: list[int], where: str) -> tuple[int, int]:
    text = answer.get("text")
    offset = answer.get("answer_start")
    if not isinstance(text, str) or not isinstance(offset, int):
        raise UserError(f"{where}: answer needs a string 'text' and an integer 'answer_start'")
    if not text:
        raise UserError(f"{where}: answer 'text' is empty; give the answer's text or mark is_impossible")
    if offset < 0 or offset + len(text) > len(context):
        raise UserError(
            f"{where}: answer_start {offset} + len(text) {len(text)} is outside the context "
            f"({len(context)} characters); fix 'answer_start'"
        )
    if context[offset : offset + len(text)] != text:
        raise UserError(
            f"{where}: answer text {text!r} does not match the context at answer_start {offset} "
            f"(context has {context[offset : offset + len(text)]!r}); fix 'answer_start' or 'text'"
        )
    return char_to_word[offset], char_to_word[offset + len(text) - 1]


class WordPieceCache:
    """``tokenizer.tokenize`` and the matching ids, memoised per distinct string (the hot path)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._cache: dict[str, tuple[list[str], list[int]]] = {}

    def prefill(self, texts: Iterable[str]) -> None:
        """Tokenise every new distinct text in one batch (``encode_batch_ids``, the tokenizer's fast path)."""
        new = list(dict.fromkeys(t for t in texts if t not in self._cache))
        batch = getattr(self.tokenizer, "encode_batch_ids", None)
        if not new or batch is None:
            return
        for text, ids in zip(new, batch(new, add_special_tokens=False)):
            ids = list(ids)
            self._cache[text] = (list(self.tokenizer.convert_ids_to_tokens(ids)), ids)

    def __call__(self, word: str) -> tuple[list[str], list[int]]:
        hit = self._cache.get(word)
        if hit is None:
            toks = list(self.tokenizer.tokenize(word))
            hit = (toks, list(self.tokenizer.convert_tokens_to_ids(toks)))
            self._cache[word] = hit
        return hit


def improve_answer_span(
    doc_tokens: Sequence[str], start: int, end: int, answer_tokens: Sequence[str]
) -> tuple[int, int]:
    """The first (start ascending, end descending) sub-span of [start, end] whose tokens equal the
    tokenised answer text; the span itself when none does (e.g. "Japan" inside "Japanese")."""
    target = list(answer_tokens)
    n = len(target)
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if new_end - new_start + 1 == n and list(doc_tokens[new_start : new_end + 1]) == target:
                return new_start, new_end
    return start, end


def doc_windows(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows: starts ``min(length, doc_stride)`` apart until one reaches the end."""
    if max_tokens_for_doc < 1:
        raise UserError(
            f"max_seq_length leaves {max_tokens_for_doc} tokens for the context after the question and "
            "3 special tokens; raise --max-seq-length or lower --max-query-length"
        )
    if doc_stride < 1:
        raise UserError(f"doc_stride must be at least 1 (got {doc_stride})")
    spans: list[tuple[int, int]] = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def is_max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window ``span_index`` is the one where token ``position`` has the most context:
    score = min(left, right context) + 0.01 * window length; the first best window wins ties."""
    best_score = None
    best_index = None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, i
    return span_index == best_index


def _max_context_flags(spans: Sequence[tuple[int, int]], num_tokens: int) -> list[int]:
    """For every document token, the index of its max-context window (same rule as :func:`is_max_context`,
    computed once per document instead of once per (window, token))."""
    best = [-1] * num_tokens
    best_score = [-1.0] * num_tokens
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        bonus = 0.01 * length
        for pos in range(start, end + 1):
            score = min(pos - start, end - pos) + bonus
            if best[pos] < 0 or score > best_score[pos]:
                best[pos], best_score[pos] = i, score
    return best


def _wordpiece_document(
    words: Sequence[str], wp: WordPieceCache
) -> tuple[list[str], list[int], list[int], list[int]]:
    """Every context word tokenised on its own: (sub-tokens, ids, sub-token -> word, word -> first sub-token)."""
    tok_to_orig: list[int] = []
    orig_to_tok: list[int] = []
    all_toks: list[str] = []
    all_ids: list[int] = []
    for i, word in enumerate(words):
        orig_to_tok.append(len(all_toks))
        w_toks, w_ids = wp(word)
        tok_to_orig.extend([i] * len(w_toks))
        all_toks.extend(w_toks)
        all_ids.extend(w_ids)
    return all_toks, all_ids, tok_to_orig, orig_to_tok


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer: Any,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    is_training: bool = False,
    unique_id_start: int = 1000000000,
    progress: bool = False,
) -> list[SquadFeature]:
    """Windowed features for every example; see the module docstring for the algorithm (and
    :mod:`bertkit.tasks.squad_bpe` for a byte-level BPE tokenizer's documents)."""
    from bertkit.tasks import squad_bpe

    bpe = squad_bpe.is_bpe(tokenizer)
    wp = WordPieceCache(tokenizer)
    seen_docs: set[int] = set()
    texts: list[str] = []
    for ex in examples:
        texts.append(ex.question_text)
        if not bpe and id(ex.doc_tokens) not in seen_docs:
            seen_docs.add(id(ex.doc_tokens))
            texts.extend(ex.doc_tokens)
    wp.prefill(texts)
    layout = pair_layout(tokenizer, user="SQuAD features")  # BERT's, or e.g. RoBERTa's <s> q </s></s> c </s>
    prefix, middle, suffix = (
        list(tokenizer.convert_ids_to_tokens(list(part)))
        for part in (layout.prefix, layout.middle, layout.suffix)
    )
    features: list[SquadFeature] = []
    unique_id = unique_id_start
    last_doc: Any = None
    iterator: Iterable = enumerate(examples)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, total=len(examples), desc="squad features", unit="ex")
    for example_index, ex in iterator:
        q_toks, q_ids = wp(ex.question_text)
        q_toks, q_ids = q_toks[:max_query_length], q_ids[:max_query_length]

        if ex.doc_tokens is not last_doc:  # questions of one paragraph share the word list
            last_doc = ex.doc_tokens
            char_spans: Sequence[tuple[int, int]] = ()
            if bpe:
                doc = squad_bpe.bpe_document(tokenizer, ex.context, split_context(ex.context)[1])
                all_toks, all_ids = doc.tokens, doc.ids
                tok_to_orig, char_spans = doc.tok_to_orig, doc.char_spans
            else:
                all_toks, all_ids, tok_to_orig, orig_to_tok = _wordpiece_document(ex.doc_tokens, wp)
            windows_key = None

        tok_start = tok_end = -1  # the answer's document sub-tokens (training, answerable questions)
        if is_training and not ex.is_impossible and bpe:
            tok_start, tok_end = squad_bpe.answer_tokens(doc, *(ex.answer_chars or (0, 0)))
        elif is_training and not ex.is_impossible:
            tok_start = orig_to_tok[ex.start_position]
            if ex.end_position < len(ex.doc_tokens) - 1:
                tok_end = orig_to_tok[ex.end_position + 1] - 1
            else:
                tok_end = len(all_toks) - 1
            tok_start, tok_end = improve_answer_span(
                all_toks, tok_start, tok_end, wp(ex.orig_answer_text or "")[0]
            )

        max_tokens_for_doc = max_seq_length - len(q_toks) - layout.specials
        if windows_key != max_tokens_for_doc:  # windows depend only on the doc and the query length
            windows_key = max_tokens_for_doc
            spans = doc_windows(len(all_toks), max_tokens_for_doc, doc_stride)
            best_window = _max_context_flags(spans, len(all_toks))

        doc_offset = len(layout.prefix) + len(q_toks) + len(layout.middle)
        head_toks = [*prefix, *q_toks, *middle]
        for span_index, (start, length) in enumerate(spans):
            stop = start + length
            tokens = head_toks + all_toks[start:stop] + suffix
            input_ids, type_ids = layout.window(list(q_ids), list(all_ids[start:stop]))
            start_pos = end_pos = None
            if is_training:
                if ex.is_impossible or not (tok_start >= start and tok_end <= stop - 1):
                    start_pos = end_pos = 0
                else:
                    start_pos = tok_start - start + doc_offset
                    end_pos = tok_end - start + doc_offset
            features.append(
                SquadFeature(
                    unique_id=unique_id,
                    example_index=example_index,
                    doc_span_index=span_index,
                    tokens=tokens,
                    input_ids=input_ids,
                    token_type_ids=type_ids,
                    doc_offset=doc_offset,
                    doc_start=start,
                    doc_length=length,
                    tok_to_orig=tok_to_orig,
                    max_context_window=best_window,
                    start_position=start_pos,
                    end_position=end_pos,
                    is_impossible=ex.is_impossible,
                    char_spans=char_spans,
                )
            )
            unique_id += 1
    return features
