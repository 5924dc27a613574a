"""Task examples to model inputs: ids with ``[CLS]``/``[SEP]``, labels, batches.

Pairs are ``[CLS] a [SEP] b [SEP]`` (or the tokenizer's own layout, e.g. RoBERTa's ``<s> a </s></s> b </s>``)
truncated longest-first (as the original ``run_classifier.py``); for tagging, each word's pieces carry the word's label on the first sub-token and -100 on the rest, and long
sentences are split into windows of whole words; multiple choice packs (context, ending) for each ending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bertkit.pair_layout import PairLayout, pair_layout
from bertkit.sentence.batching import pad
from bertkit.tasks.spec import TaskData
from bertkit.tokenizer import Tokenizer


@dataclass
class Feature:
    input_ids: list  # list[int], or list[list[int]] for multiple choice
    token_type_ids: list
    label: Any  # int / float / list[int] (token labels per position) / None
    example: int  # index of the example it came from
    word_start: int = 0  # tagging: index of the first word of this window in the sentence
    n_words: int = 0  # tagging: number of words in this window

    def __len__(self) -> int:
        if self.input_ids and isinstance(self.input_ids[0], list):
            return max(len(x) for x in self.input_ids)
        return len(self.input_ids)


def truncate_pair_as_original(
    a: list[int], b: list[int] | None, max_tokens: int
) -> tuple[list[int], list[int] | None]:
    """Longest-first truncation (a token off the end of the longer segment at a time, the first on a tie), as
    the original ``run_classifier.py``, which fine-tuning follows. The server cuts as the tokenizers library
    (:func:`bertkit.serving.pairs.truncate_pair_as_tokenizers`), which keeps one more token of the first text
    where the budget is odd and the first text is longer."""
    a = list(a)
    b = list(b) if b is not None else None
    while len(a) + (len(b) if b is not None else 0) > max_tokens:
        if b is not None and len(b) > len(a):
            b.pop()
        else:
            a.pop()
    return a, b


def _pack(
    tok: Tokenizer, layout: PairLayout | None, a: list[int], b: list[int] | None, max_seq_length: int
) -> tuple[list[int], list[int]]:
    if b is None or layout is None:
        a, _ = truncate_pair_as_original(a, None, max_seq_length - 2)
        return [tok.cls_token_id, *a, tok.sep_token_id], [0] * (len(a) + 2)
    a, b = truncate_pair_as_original(a, b, max_seq_length - layout.specials)
    return layout.window(a, b)


def encode_pairs(
    tok: Tokenizer, a: Sequence[str], b: Sequence[str | None], max_seq_length: int
) -> list[tuple]:
    """(input ids, segment ids) of each text, or pair of texts in the tokenizer's own layout (BERT's
    ``[CLS] a [SEP] b [SEP]``; RoBERTa's ``<s> a </s></s> b </s>``: :mod:`bertkit.pair_layout`)."""
    has_b = [x is not None for x in b]
    # asked only when there are pairs: a one-text task never needs the tokenizer's pair template
    layout = pair_layout(tok) if any(has_b) else None
    ids_a = tok.encode_batch_ids(list(a), add_special_tokens=False)
    it = iter(tok.encode_batch_ids([x for x in b if x is not None], add_special_tokens=False))
    # A second segment without tokens is no second segment, as run_classifier.py (`if tokens_b:`) and
    # transformers' tok(a, "") encode it: [CLS] a [SEP], not [CLS] a [SEP] [SEP].
    return [
        _pack(tok, layout, ia, (next(it) or None) if hb else None, max_seq_length)
        for ia, hb in zip(ids_a, has_b)
    ]


def encode_seq(
    tok: Tokenizer, examples: list, label2id: dict[str, int] | None, max_seq_length: int
) -> list[Feature]:
    packed = encode_pairs(tok, [e.text_a for e in examples], [e.text_b for e in examples], max_seq_length)
    feats = []
    for i, (e, (ids, types)) in enumerate(zip(examples, packed)):
        if e.label is None:
            label = None
        elif isinstance(e.label, list):  # multi-label: a multi-hot target over label2id's order
            label = [0.0] * len(label2id or {})
            for name in e.label:
                label[label2id[name]] = 1.0
        elif label2id is None:
            label = float(e.label)
        else:
            label = label2id[str(e.label)]
        feats.append(Feature(ids, types, label, i))
    return feats


def encode_tokens(
    tok: Tokenizer, sentences: list, label2id: dict[str, int], max_seq_length: int
) -> list[Feature]:
    """Label on each word's first sub-token, -100 elsewhere; sentences longer than ``max_seq_length`` pieces
    are split into consecutive windows of whole words (a single over-long word is cut)."""
    flat = [w for s in sentences for w in s.words]
    pieces = tok.encode_batch_ids(flat, add_special_tokens=False) if flat else []
    unk = tok.unk_token_id
    feats: list[Feature] = []
    budget = max_seq_length - 2
    k = 0
    for si, s in enumerate(sentences):
        word_pieces = []
        for _ in s.words:
            p = pieces[k] or [unk]  # a word with no pieces (e.g. control characters) still gets a slot
            word_pieces.append(p[:budget])
            k += 1
        start = 0
        while start < len(word_pieces) or (start == 0 and not word_pieces):
            ids, labels, n = [tok.cls_token_id], [-100], 0
            while start + n < len(word_pieces) and len(ids) - 1 + len(word_pieces[start + n]) <= budget:
                p = word_pieces[start + n]
                tag = s.tags[start + n] if s.tags is not None else None
                ids += p
                labels += [label2id.get(tag, -100) if tag is not None else 0] + [-100] * (len(p) - 1)
                n += 1
            ids.append(tok.sep_token_id)
            labels.append(-100)
            feats.append(Feature(ids, [0] * len(ids), labels, si, word_start=start, n_words=n))
            start += n
            if not word_pieces:
                break
    return feats


def encode_choice(tok: Tokenizer, examples: list, max_seq_length: int) -> list[Feature]:
    n = len(examples[0].endings) if examples else 0
    ctx = [e.context for e in examples for _ in range(n)]
    ends = [x for e in examples for x in e.endings]
    packed = encode_pairs(tok, ctx, ends, max_seq_length)
    feats = []
    for i, e in enumerate(examples):
        group = packed[i * n : (i + 1) * n]
        feats.append(Feature([g[0] for g in group], [g[1] for g in group], e.label, i))
    return feats


def encode(task: TaskData, tok: Tokenizer, examples: list, max_seq_length: int) -> list[Feature]:
    label2id = {lab: i for i, lab in enumerate(task.labels)} if task.labels is not None else None
    if task.kind == "seq":
        return encode_seq(tok, examples, label2id, max_seq_length)
    if task.kind == "token":
        return encode_tokens(tok, examples, label2id, max_seq_length)
    if task.kind == "choice":
        return encode_choice(tok, examples, max_seq_length)
    raise ValueError(f"unknown task kind {task.kind!r}")


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Evaluation batches: indices sorted by length, cut into batches (little padding, order irrelevant).
    Training batches come from :class:`bertkit.train.LengthGroupedBatches` (shuffled and resumable)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def collate(feats: Sequence[Feature], kind: str, pad_id: int = 0) -> dict[str, torch.Tensor]:
    if kind == "choice":  # [B * C] rows padded together, then [B, C, T]
        rows = [x for f in feats for x in f.input_ids]
        ids, mask, types = pad(rows, pad_id, [y for f in feats for y in f.token_type_ids])
        ids, mask, types = (t.view(len(feats), len(feats[0].input_ids), -1) for t in (ids, mask, types))
    else:
        ids, mask, types = pad([f.input_ids for f in feats], pad_id, [f.token_type_ids for f in feats])
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    if all(f.label is not None for f in feats):
        if kind == "token":
            labels = torch.full(ids.shape, -100, dtype=torch.long)
            for i, f in enumerate(feats):
                labels[i, : len(f.label)] = torch.tensor(f.label)
            batch["labels"] = labels
        elif isinstance(feats[0].label, (float, list)):  # regression / multi-hot targets
            batch["labels"] = torch.tensor([f.label for f in feats], dtype=torch.float)
        else:
            batch["labels"] = torch.tensor([f.label for f in feats], dtype=torch.long)
    return batch
