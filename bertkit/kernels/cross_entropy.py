"""The generator's masked-LM loss and its softmax in one pass, for ELECTRA's step.

ELECTRA needs two things from the generator's logits [N, V]: the mean cross-entropy at the targets, and the
softmax itself, to sample the replacements. The plain form (:mod:`bertkit.electra`) computes
``log_softmax``, takes ``nll_loss`` of it, and exponentiates it again for the sampler; autograd then runs
log-softmax's backward (which exponentiates once more) and nll's (which fills a zero [N, V] gradient). At
V = 30,522 these vocabulary-wide passes are several percent of a ModernBERT-mini ELECTRA step.

Here the softmax is computed once, from the log-softmax in place, handed to the sampler and kept for the
backward, whose gradient is the textbook ``(softmax - one_hot(target)) / N``: one [N, V] pass.
"""

from __future__ import annotations

import torch
from torch import Tensor


class _CrossEntropyWithProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        probs = torch.log_softmax(logits, dim=-1)
        loss = -probs.gather(1, targets[:, None]).mean()
        probs.exp_()  # the log-softmax's buffer becomes the softmax
        ctx.save_for_backward(probs, targets)
        ctx.mark_non_differentiable(probs)
        return loss, probs

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_probs: Tensor | None) -> tuple[Tensor, None]:
        probs, targets = ctx.saved_tensors
        scale = grad_loss / probs.shape[0]
        grad = probs * scale
        grad[torch.arange(probs.shape[0], device=probs.device), targets] -= scale
        return grad, None


def cross_entropy_with_probs(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """logits [N, V] (float32, N >= 1), targets [N] -> (mean cross-entropy, softmax [N, V] without gradient).
    The softmax is the one the backward reads: do not modify it in place."""
    return _CrossEntropyWithProbs.apply(logits, targets)
