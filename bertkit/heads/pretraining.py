"""Pre-training heads: masked LM (+ next sentence prediction), the LTR ablation, fill-mask.

Module and parameter names are transformers' (``cls.predictions.transform.dense``,
``cls.predictions.transform.LayerNorm``, ``cls.predictions.decoder`` tied to
``bert.embeddings.word_embeddings.weight``, ``cls.predictions.bias``, ``cls.seq_relationship``), so a
saved model loads into transformers' ``BertForPreTraining`` / ``BertForMaskedLM`` and back.

Call conventions are transformers': ``labels`` [B, T] with -100 at positions to ignore,
``next_sentence_label`` [B] (0 = the second segment really follows, 1 = random, as in the original).
Differences, both documented in the design:

- With ``labels`` given, the MLM head runs **only at the labelled positions** (gather, then
  transform + decoder): ``prediction_logits`` is then ``[N, vocab]`` for the N labelled positions in
  row-major order and ``masked_lm_labels`` holds their labels. This skips ~85% of the largest matmul
  and its softmax; loss and gradients equal the dense computation (tested). Pass ``sparse_mlm=False``
  for transformers' dense ``[B, T, vocab]`` logits.
- ``loss`` is the sum of the losses whose labels were given (transformers' BertForPreTraining needs both).
- ``causal=True`` runs the encoder left-to-right (the "LTR & No NSP" ablation); see :func:`ltr_batch`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.config import BertConfig
from bertkit.kernels import Linear, linear
from bertkit.model import ACT2FN, BertModel
from bertkit.modeling_utils import BertPreTrainedModel

IGNORE_INDEX = -100


class _Output:
    """transformers-style access: attributes, ``out["loss"]`` and ``out[0]`` (non-None fields in order)."""

    def __getitem__(self, key):
        if isinstance(key, str):
            return getattr(self, key)
        return self.to_tuple()[key]

    def to_tuple(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


@dataclass
class BertForPreTrainingOutput(_Output):
    loss: Tensor | None = None
    prediction_logits: Tensor | None = None
    seq_relationship_logits: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    masked_lm_loss: Tensor | None = None
    next_sentence_loss: Tensor | None = None
    masked_lm_labels: Tensor | None = None  # labels of the rows of a sparse prediction_logits


@dataclass
class MaskedLMOutput(_Output):
    loss: Tensor | None = None
    logits: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    masked_lm_labels: Tensor | None = None


# ------------------------------------------------------------------------------------------------ modules


class BertPredictionHeadTransform(nn.Module):
    """dense -> activation -> LayerNorm (the MLM head's transform in the original), out to the embeddings'
    width, so the tied decoder can read it."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_width)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """transform, then the decoder (weight tied to the word embeddings) plus a separate output bias."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.embedding_width, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor) -> Tensor:
        # the decoder's weight is the word embeddings' and its bias a parameter of this module
        # (transformers' names), so the GEMM is called here rather than through ``self.decoder``
        return linear(self.transform(x), self.decoder.weight, self.bias)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)

    def forward(self, x: Tensor) -> Tensor:
        return self.predictions(x)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output: Tensor, pooled_output: Tensor) -> tuple[Tensor, Tensor]:
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


# ---------------------------------------------------------------------------------------------- functions


def mlm_logits_and_loss(
    head: BertLMPredictionHead, hidden: Tensor, labels: Tensor | None, sparse: bool = True
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(logits, loss, labels of the logits' rows). Sparse: logits only where ``labels != -100``."""
    if labels is None:
        return head(hidden), None, None
    if not sparse:
        logits = head(hidden)
        loss = _ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return logits, loss, None
    flat_labels = labels.reshape(-1)
    idx = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)
    picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, idx)
    logits = head(picked)
    sel = flat_labels.index_select(0, idx)
    loss = _LabelledRowsCrossEntropy.apply(logits.float(), sel) if idx.numel() else _ce(logits, sel)
    return logits, loss, sel


class _LabelledRowsCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits [N, V] against labels [N] (every row labelled), as ``F.cross_entropy``.

    Why not ``F.cross_entropy``: its backward allocates two more [N, V] tensors (a zero-filled one for the
    NLL gradient, then the log-softmax gradient); for the MLM decoder's rows x 30k vocabulary each is tens
    of MB of freshly faulted pages. Here the saved log-probabilities become the gradient in place,
    exp(log p) - onehot, scaled: one [N, V] allocation in all. If backward runs a second time
    (``retain_graph``), the log-probabilities are recomputed from the logits."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor) -> Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(logits, labels)
        ctx.log_probs = log_probs  # an intermediate, consumed by the first backward
        return -log_probs.gather(1, labels[:, None]).mean()

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, labels = ctx.saved_tensors
        log_probs = ctx.log_probs if ctx.log_probs is not None else torch.log_softmax(logits, dim=-1)
        ctx.log_probs = None
        g = log_probs.exp_()  # softmax
        rows = torch.arange(labels.shape[0], device=labels.device)
        g[rows, labels] -= 1.0
        return g.mul_(grad / labels.shape[0]), None


def _ce(logits: Tensor, labels: Tensor) -> Tensor:
    if not bool((labels != IGNORE_INDEX).any()):  # nothing labelled: a zero that keeps the graph
        return logits.float().sum() * 0.0
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX)


def ltr_batch(batch: dict, pad_token_id: int = 0) -> dict:
    """Turn an MLM batch into a left-to-right LM batch: un-mask the inputs (labels hold the originals),
    label each position with the next real token (-100 at the last real token and on padding),
    and drop the NSP label."""
    ids = batch["input_ids"]
    labels = batch.get("labels")
    if labels is not None:
        ids = torch.where(labels != IGNORE_INDEX, labels, ids)
    mask = batch.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(ids)
    nxt = torch.full_like(ids, IGNORE_INDEX)
    nxt[:, :-1] = torch.where(mask[:, 1:].bool(), ids[:, 1:], torch.full_like(ids[:, 1:], IGNORE_INDEX))
    out = {"input_ids": ids, "attention_mask": mask, "labels": nxt}
    if "token_type_ids" in batch:
        out["token_type_ids"] = batch["token_type_ids"]
    return out


def pretraining_output(
    logits: Tensor | None,
    mlm_loss: Tensor | None,
    masked_lm_labels: Tensor | None,
    nsp_logits: Tensor,
    next_sentence_label: Tensor | None,
    hidden_states: tuple[Tensor, ...] | None,
) -> BertForPreTrainingOutput:
    """Both heads' outputs in one: NSP logits [B, 2] and, with ``next_sentence_label`` [B], their
    cross-entropy; the loss is the masked-LM loss plus it (either alone when the other is absent)."""
    nsp_loss = None
    if next_sentence_label is not None:
        nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.reshape(-1))
    losses = [x for x in (mlm_loss, nsp_loss) if x is not None]
    return BertForPreTrainingOutput(
        loss=sum(losses[1:], losses[0]) if losses else None,
        prediction_logits=logits,
        seq_relationship_logits=nsp_logits,
        hidden_states=hidden_states,
        masked_lm_loss=mlm_loss,
        next_sentence_loss=nsp_loss,
        masked_lm_labels=masked_lm_labels,
    )


def pretraining_metrics(
    out: BertForPreTrainingOutput | MaskedLMOutput,
    labels: Tensor | None = None,
    next_sentence_label: Tensor | None = None,
) -> dict:
    """Metrics of one batch as (numerator, denominator) pairs, weighted as the original evaluation:
    ``masked_lm_accuracy`` and ``masked_lm_loss`` over all labelled tokens, ``next_sentence_accuracy``
    and ``next_sentence_loss`` over examples. Values are floats (one host sync)."""
    res: dict[str, tuple[float, float]] = {}
    logits = out.prediction_logits if isinstance(out, BertForPreTrainingOutput) else out.logits
    if logits is not None and (out.masked_lm_labels is not None or labels is not None):
        with torch.no_grad():
            if out.masked_lm_labels is not None:
                sel, pred = out.masked_lm_labels, logits.argmax(-1)
            else:
                keep = labels.reshape(-1) != IGNORE_INDEX
                sel, pred = labels.reshape(-1)[keep], logits.reshape(-1, logits.shape[-1]).argmax(-1)[keep]
            n = float(sel.numel())
            correct = float((pred == sel).sum())
        mlm_loss = out.masked_lm_loss if isinstance(out, BertForPreTrainingOutput) else out.loss
        if n:
            res["masked_lm_accuracy"] = (correct, n)
            if mlm_loss is not None:
                res["masked_lm_loss"] = (float(mlm_loss.detach()) * n, n)
    if isinstance(out, BertForPreTrainingOutput) and next_sentence_label is not None:
        with torch.no_grad():
            b = float(next_sentence_label.numel())
            correct = float((out.seq_relationship_logits.argmax(-1) == next_sentence_label).sum())
        res["next_sentence_accuracy"] = (correct, b)
        if out.next_sentence_loss is not None:
            res["next_sentence_loss"] = (float(out.next_sentence_loss.detach()) * b, b)
    return res


# ------------------------------------------------------------------------------------------------- models


class _WithMLMHead(BertPreTrainedModel):
    """What every model with the masked-LM head (``self.cls.predictions``) shares: the decoder is tied to
    the word embeddings and its bias starts at zero."""

    _tied_weights = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}

    def _init_extra(self) -> None:
        self.cls.predictions.bias.zero_()

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder


class BertForPreTraining(_WithMLMHead):
    """BERT with the masked-LM and next-sentence heads (the paper's pre-training model)."""

    _ignored_keys = _WithMLMHead._ignored_keys + (r"^cls\.predictions\.decoder\.bias$",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        next_sentence_label: Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        causal: bool = False,
        sparse_mlm: bool = True,
    ) -> BertForPreTrainingOutput:
        enc = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, causal=causal
        )
        logits, mlm_loss, sel = mlm_logits_and_loss(
            self.cls.predictions, enc.last_hidden_state, labels, sparse=sparse_mlm
        )
        nsp_logits = self.cls.seq_relationship(enc.pooler_output)
        out = pretraining_output(logits, mlm_loss, sel, nsp_logits, next_sentence_label, enc.hidden_states)
        return out if return_dict else out.to_tuple()


class BertForMaskedLM(_WithMLMHead):
    """BERT with the masked-LM head only (fill-mask; the "No NSP" and LTR ablations' model)."""

    _ignored_keys = _WithMLMHead._ignored_keys + (
        r"^cls\.predictions\.decoder\.bias$",
        r"^cls\.seq_relationship\.",
        r"^(bert\.)?pooler\.",
    )

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        causal: bool = False,
        sparse_mlm: bool = True,
    ) -> MaskedLMOutput:
        enc = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, causal=causal
        )
        logits, loss, sel = mlm_logits_and_loss(
            self.cls.predictions, enc.last_hidden_state, labels, sparse_mlm
        )
        out = MaskedLMOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states, masked_lm_labels=sel)
        return out if return_dict else out.to_tuple()


@torch.no_grad()
def fill_mask(
    model: BertForMaskedLM | BertForPreTraining, tokenizer, text: str, top_k: int = 5
) -> list[list[dict]]:
    """Top-``top_k`` predictions for each ``[MASK]`` in ``text``: ``[[{"token", "score"}, ...], ...]``."""
    was = model.training
    model.eval()
    enc = tokenizer([text], padding=True, return_tensors="pt")
    enc = {k: v.to(model.device) for k, v in enc.items()}
    out = model(**enc)
    logits = out.logits if isinstance(out, MaskedLMOutput) else out.prediction_logits
    model.train(was)
    positions = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().squeeze(1).tolist()
    result = []
    for pos in positions:
        probs = logits[0, pos].float().softmax(-1)
        top = probs.topk(top_k)
        result.append(
            [
                {"token": tokenizer.convert_ids_to_tokens([int(i)])[0], "score": round(float(s), 4)}
                for s, i in zip(top.values, top.indices)
            ]
        )
    return result


__all__ = [
    "BertForMaskedLM",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "BertLMPredictionHead",
    "BertOnlyMLMHead",
    "BertPreTrainingHeads",
    "BertPredictionHeadTransform",
    "MaskedLMOutput",
    "fill_mask",
    "ltr_batch",
    "mlm_logits_and_loss",
    "pretraining_metrics",
]
