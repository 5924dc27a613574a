"""Fine-tuning heads: one added layer on the encoder, all parameters trained (the paper, section 4).

Names and call conventions are transformers' (``bert``, ``classifier``, ``qa_outputs``; ``labels`` with -100
for ignored positions; outputs ``.loss``, ``.logits``, ``.start_logits``, ``.end_logits``), so a saved
directory loads in transformers' ``BertFor…`` classes and code written for one runs on the other.

- ``BertForSequenceClassification``: pooled ``[CLS]`` -> dropout -> linear. ``problem_type`` as in
  transformers: ``regression`` (num_labels == 1, MSE), ``single_label_classification`` (cross-entropy),
  ``multi_label_classification`` (BCE with logits); inferred on the first call with labels when unset.
- ``BertForTokenClassification``: every token's vector -> dropout -> linear. With ``use_crf`` (a config key,
  e.g. ``from_pretrained(dir, use_crf=True)``) a linear-chain CRF runs over the labelled positions
  (the first sub-token of each word): the loss is its negative log-likelihood and ``decode()`` is Viterbi.
  Its parameters are ``crf.*`` (transformers ignores them and uses the emission logits).
- ``BertForQuestionAnswering``: ``qa_outputs`` maps each token to a start and an end logit.
- ``BertForMultipleChoice``: input [B, C, T]; one score per choice from the pooled ``[CLS]``; softmax over C.
Dropout is ``classifier_dropout`` when set, else ``hidden_dropout_prob`` (0.1).

On a checkpoint of BERT's family (:mod:`bertkit.bert_family`) the sequence head is the one transformers gives
that family, so classifiers fine-tuned there (sentiment models, NLI, rerankers such as bge-reranker) load
whole and bertkit's load in transformers: no pooler, the first token's vector -> ``classifier.dense`` ->
tanh (RoBERTa, XLM-RoBERTa) or GELU (ELECTRA) -> ``classifier.out_proj``; DistilBERT's ``pre_classifier`` ->
ReLU -> ``classifier``.

Two config keys serve the paper's left-to-right ablation (Table 5), read from ``config.json``:

- ``"causal": true`` keeps the causal mask at fine-tuning time (each token sees only itself and what is to
  its left), as the paper fine-tunes its LTR model. ``bertkit pretrain --objective ltr`` writes it into the
  model's config, so an LTR model is fine-tuned left-only unless the key is removed. A causal
  ``[CLS]`` has seen nothing, so the sequence heads pool the *last real token* instead (dense + tanh of the
  pooler, as OpenAI GPT classifies from its last token).
- ``"head_bilstm": true`` puts a randomly initialised one-layer BiLSTM (H/2 units per direction, so its
  output is H wide) between the encoder and the output layer, the paper's "LTR & No NSP + BiLSTM" row.
  Token/span heads read its per-token outputs; sequence heads its mean over the real tokens. Its
  parameters are ``bilstm.*`` (transformers does not know them).

``"classifier_pooling": "mean"`` (default ``"cls"``) makes the sequence heads classify the mean of the last
layer over the real tokens instead of the pooled ``[CLS]`` (as sentence-transformers pools): with
``--freeze-encoder`` it is a linear probe of what pre-training put into the tokens' states, which an MLM-only
model never trains ``[CLS]`` or the pooler to summarise. transformers ignores the key (it pools ``[CLS]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.bert_family import member_of
from bertkit.config import BertConfig
from bertkit.heads.pretraining import _Output
from bertkit.kernels.dropout import Dropout
from bertkit.model import BertModel
from bertkit.modeling_utils import BertPreTrainedModel
from bertkit.pooling import pool  # the sentence encoders' pooling: mean over the real tokens

__all__ = [
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
    "CRF",
    "classification_loss",
    "span_loss",
    "HeadBiLSTM",
    "SequenceClassifierOutput",
    "TokenClassifierOutput",
    "QuestionAnsweringOutput",
    "MultipleChoiceOutput",
]


@dataclass
class _LogitsOutput(_Output):
    loss: Tensor | None = None
    logits: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None


class SequenceClassifierOutput(_LogitsOutput):
    """``logits`` [B, num_labels]"""


class TokenClassifierOutput(_LogitsOutput):
    """``logits`` [B, T, num_labels]"""


class MultipleChoiceOutput(_LogitsOutput):
    """``logits`` [B, C]"""


@dataclass
class QuestionAnsweringOutput(_Output):
    loss: Tensor | None = None
    start_logits: Tensor | None = None
    end_logits: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None


def _setting(config: BertConfig, name: str, default=None):
    value = getattr(config, name, None)
    if value is None:
        value = getattr(config, "extra", {}).get(name, None)
    return default if value is None else value


class HeadBiLSTM(nn.Module):
    """A bidirectional LSTM over the encoder's outputs that never reads padding (packed sequences)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(hidden_size, hidden_size // 2, batch_first=True, bidirectional=True)

    def forward(self, x: Tensor, attention_mask: Tensor | None) -> Tensor:
        """x: [B, T, H], attention_mask: [B, T] (1 = real) -> [B, T, 2 * (H // 2)] (zeros on padding)."""
        if attention_mask is None:
            return self.lstm(x)[0]
        lengths = attention_mask.sum(-1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0]


POOLINGS = ("cls", "mean")


def _head_settings(module: nn.Module, config: BertConfig) -> None:
    """``module.causal``, ``module.bilstm`` and ``module.pooling`` from the config (see the module docstring)."""
    module.causal = bool(_setting(config, "causal", False))
    module.bilstm = HeadBiLSTM(config.hidden_size) if _setting(config, "head_bilstm", False) else None
    module.pooling = _setting(config, "classifier_pooling", "cls")
    if module.pooling not in POOLINGS:
        raise ValueError(f"classifier_pooling must be one of {POOLINGS}, not {module.pooling!r}")


def _sequence_vector(model: nn.Module, out, attention_mask: Tensor | None) -> Tensor:
    """The [B, H] vector a sequence head classifies: the pooled [CLS]; the pooled last real token under a
    causal mask; the BiLSTM's mean over real tokens with ``head_bilstm``; the last layer's mean over real
    tokens with ``classifier_pooling = "mean"``."""
    seq = out.last_hidden_state
    mask = attention_mask if attention_mask is not None else torch.ones(seq.shape[:2], device=seq.device)
    if model.bilstm is not None:
        return pool(model.bilstm(seq, mask), mask, "mean")
    if model.pooling == "mean":
        return pool(seq, mask, "mean")
    if model.causal:
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        return model.bert.pooler(seq[torch.arange(seq.size(0), device=seq.device), last].unsqueeze(1))
    if model.bert.pooler is None:  # BERT's family without a pooler: the first token's vector itself
        return seq[:, 0]
    return out.pooler_output


def _token_vectors(model: nn.Module, out, attention_mask: Tensor | None) -> Tensor:
    """[B, T, H] per-token vectors for token/span heads (through the BiLSTM with ``head_bilstm``)."""
    if model.bilstm is None:
        return out.last_hidden_state
    return model.bilstm(out.last_hidden_state, attention_mask)


def _dropout(config: BertConfig) -> Dropout:
    p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    return Dropout(p)


def classification_loss(config: Any, logits: Tensor, labels: Tensor) -> Tensor:
    """A sequence head's loss by ``config.problem_type``, as transformers: ``regression`` (MSE),
    ``single_label_classification`` (cross-entropy, -100 ignored) or ``multi_label_classification`` (BCE with
    logits); inferred from ``num_labels`` and the labels' dtype when unset, and written into the config.
    logits [B, num_labels]; labels [B] (or [B, num_labels] for multi-label and multi-output regression)."""
    num_labels = logits.shape[-1]
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1), ignore_index=-100)
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def span_loss(
    start_logits: Tensor, end_logits: Tensor, start_positions: Tensor, end_positions: Tensor
) -> Tensor:
    """The mean of the start and end cross-entropies: logits [B, T], positions [B]; positions outside the
    sequence are ignored, as in transformers."""
    ignored = start_logits.size(1)
    s = start_positions.view(-1).clamp(0, ignored)
    e = end_positions.view(-1).clamp(0, ignored)
    return (
        F.cross_entropy(start_logits, s, ignore_index=ignored)
        + F.cross_entropy(end_logits, e, ignore_index=ignored)
    ) / 2


# Keys of a pre-training checkpoint that a fine-tuning head does not use: dropped without a warning.
_PRETRAINING_KEYS = BertPreTrainedModel._ignored_keys + (r"^cls\.",)
_POOLER_KEYS = (r"(^|\.)pooler\.",)


class FamilyClassificationHead(nn.Module):
    """RoBERTa's and ELECTRA's sequence classifier, on the first token's vector: dropout -> dense ->
    activation -> dropout -> out_proj."""

    def __init__(self, config: BertConfig, activation: str) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = _dropout(config)
        self.activation = {"tanh": torch.tanh, "gelu": F.gelu}[activation]
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, x: Tensor) -> Tensor:
        """[B, H] -> [B, num_labels]"""
        return self.out_proj(self.dropout(self.activation(self.dense(self.dropout(x)))))


class BertForSequenceClassification(BertPreTrainedModel):
    _ignored_keys = _PRETRAINING_KEYS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        member = member_of(config.model_type)
        family = member.classifier  # BERT's "pooler": pooled [CLS] -> linear
        self.bert = BertModel(config, add_pooling_layer=family == "pooler")
        self.dropout = _dropout(config)
        # DistilBERT's classifier has a layer before it (pre_classifier); RoBERTa's and ELECTRA's are modules
        self.pre_classifier = (
            nn.Linear(config.hidden_size, config.hidden_size) if member.pre_classifier else None
        )
        if family in ("tanh", "gelu"):
            self.classifier: nn.Module = FamilyClassificationHead(config, family)
        else:
            self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        _head_settings(self, config)
        self.post_init()

    def classify(self, x: Tensor) -> Tensor:
        """The sequence vector [B, H] -> logits [B, num_labels]."""
        if self.pre_classifier is not None:
            x = F.relu(self.pre_classifier(x))
        if isinstance(self.classifier, FamilyClassificationHead):
            return self.classifier(x)
        return self.classifier(self.dropout(x))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput:
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, causal=self.causal
        )
        logits = self.classify(_sequence_vector(self, out, attention_mask))
        loss = classification_loss(self.config, logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


class CRF(nn.Module):
    """Linear-chain CRF over label sequences: ``transitions[i, j]`` scores label i followed by label j."""

    def __init__(self, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.start_transitions = nn.Parameter(torch.zeros(num_labels))
        self.end_transitions = nn.Parameter(torch.zeros(num_labels))
        self.transitions = nn.Parameter(torch.zeros(num_labels, num_labels))

    @staticmethod
    def compact(emissions: Tensor, mask: Tensor, labels: Tensor | None = None):
        """Move the masked positions of each row to the front: [B, T, L] -> [B, N, L] with N the largest
        count, a left-aligned mask [B, N], and the gathered labels (or None)."""
        mask = mask.bool()
        counts = mask.sum(1)
        n = max(int(counts.max()) if counts.numel() else 0, 1)
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :n]
        em = emissions.gather(1, order.unsqueeze(-1).expand(-1, -1, emissions.size(-1)))
        cmask = torch.arange(n, device=mask.device)[None, :] < counts[:, None]
        lab = labels.gather(1, order) if labels is not None else None
        return em, cmask, lab, order

    def _score(self, em: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        b = torch.arange(em.size(0), device=em.device)
        tags = tags.clamp(min=0)
        score = self.start_transitions[tags[:, 0]] + em[b, 0, tags[:, 0]]
        for t in range(1, em.size(1)):
            step = self.transitions[tags[:, t - 1], tags[:, t]] + em[b, t, tags[:, t]]
            score = score + step * mask[:, t]
        last = tags.gather(1, (mask.sum(1).long() - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        return score + self.end_transitions[last]

    def _log_partition(self, em: Tensor, mask: Tensor) -> Tensor:
        alpha = self.start_transitions + em[:, 0]  # [B, L]
        for t in range(1, em.size(1)):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.transitions.unsqueeze(0), dim=1) + em[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), nxt, alpha)
        return torch.logsumexp(alpha + self.end_transitions, dim=1)

    def neg_log_likelihood(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """Mean over the sequences that have at least one labelled position; inputs already compacted."""
        mask = mask.bool()
        has = mask[:, 0]
        if not bool(has.any()):
            return emissions.sum() * 0.0
        em, tags, mask = emissions[has], tags[has], mask[has]
        nll = self._log_partition(em, mask) - self._score(em, tags, mask.to(em.dtype))
        return nll.mean()

    @torch.no_grad()
    def viterbi(self, emissions: Tensor, mask: Tensor) -> list[list[int]]:
        """Best label sequence per row (length = the row's mask count); inputs already compacted."""
        mask = mask.bool()
        score = self.start_transitions + emissions[:, 0]
        history = []
        for t in range(1, emissions.size(1)):
            cand = score.unsqueeze(2) + self.transitions.unsqueeze(0)  # [B, from, to]
            best, idx = cand.max(dim=1)
            nxt = best + emissions[:, t]
            score = torch.where(mask[:, t].unsqueeze(1), nxt, score)
            history.append(idx)
        score = score + self.end_transitions
        out = []
        lengths = mask.sum(1).tolist()
        for i, n in enumerate(lengths):
            if n == 0:
                out.append([])
                continue
            best = int(score[i].argmax())
            path = [best]
            for t in range(n - 1, 0, -1):
                best = int(history[t - 1][i, best])
                path.append(best)
            out.append(path[::-1])
        return out


class BertForTokenClassification(BertPreTrainedModel):
    _ignored_keys = _PRETRAINING_KEYS + _POOLER_KEYS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = _dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.use_crf = bool(_setting(config, "use_crf", False))
        self.crf = CRF(config.num_labels) if self.use_crf else None
        _head_settings(self, config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> TokenClassifierOutput:
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, causal=self.causal
        )
        logits = self.classifier(self.dropout(_token_vectors(self, out, attention_mask)))
        loss = None
        if labels is not None:
            if self.crf is not None:
                em, cmask, clab, _ = CRF.compact(logits, labels != -100, labels)
                loss = self.crf.neg_log_likelihood(em, clab, cmask)
            else:
                loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)

    @torch.no_grad()
    def decode(self, logits: Tensor, mask: Tensor) -> list[list[int]]:
        """Label ids at the masked positions (e.g. first sub-tokens) of each row: Viterbi with a CRF,
        argmax without."""
        mask = mask.bool()
        if self.crf is None:
            pred = logits.argmax(-1)
            return [pred[i][mask[i]].tolist() for i in range(pred.size(0))]
        em, cmask, _, _ = CRF.compact(logits.float(), mask)
        return self.crf.viterbi(em, cmask)


class BertForQuestionAnswering(BertPreTrainedModel):
    _ignored_keys = _PRETRAINING_KEYS + _POOLER_KEYS

    def __init__(self, config: BertConfig) -> None:
        if config.id2label is None:
            config.num_labels = 2
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        _head_settings(self, config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> QuestionAnsweringOutput:
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, causal=self.causal
        )
        logits = self.qa_outputs(_token_vectors(self, out, attention_mask))
        start_logits, end_logits = logits[..., 0].contiguous(), logits[..., 1].contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits, hidden_states=out.hidden_states
        )


class BertForMultipleChoice(BertPreTrainedModel):
    _ignored_keys = _PRETRAINING_KEYS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.dropout = _dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        _head_settings(self, config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> MultipleChoiceOutput:
        b, c, t = input_ids.shape

        def flat(x: Tensor | None) -> Tensor | None:
            return None if x is None else x.reshape(b * c, t)

        out = self.bert(
            flat(input_ids),
            attention_mask=flat(attention_mask),
            token_type_ids=flat(token_type_ids),
            position_ids=flat(position_ids),
            output_hidden_states=output_hidden_states,
            causal=self.causal,
        )
        logits = self.classifier(self.dropout(_sequence_vector(self, out, flat(attention_mask)))).view(b, c)
        loss = F.cross_entropy(logits, labels.view(-1)) if labels is not None else None
        return MultipleChoiceOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
