"""Losses of sentence-embedding training (the definitions of sentence-transformers' losses of these names).

All take sentence vectors [B, H] (not normalised; the losses normalise where cosine is meant).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def mnrl(
    queries: Tensor,
    positives: Tensor,
    negatives: Tensor | None = None,
    scale: float = 20.0,
    symmetric: bool = False,
) -> Tensor:
    """MultipleNegativesRanking: query i must pick positive i among all B positives (+ all negatives).

    ``queries``/``positives`` [B, H], ``negatives`` [M, H] (hard negatives of the batch, any count);
    cross-entropy over ``scale * cos``. ``symmetric`` adds the reverse direction (each positive picks its
    query among the B queries) and averages the two, as MultipleNegativesSymmetricRankingLoss does.
    """
    docs = positives if negatives is None or len(negatives) == 0 else torch.cat([positives, negatives])
    scores = scale * (F.normalize(queries, dim=-1) @ F.normalize(docs, dim=-1).T)  # [B, B+M] cosines
    labels = torch.arange(len(queries), device=queries.device)
    loss = F.cross_entropy(scores, labels)
    if symmetric:
        back = scores[:, : len(queries)].T  # [B, B]: positive j vs every query
        loss = (loss + F.cross_entropy(back, labels)) / 2
    return loss


def cosine_loss(a: Tensor, b: Tensor, scores: Tensor) -> Tensor:
    """CosineSimilarityLoss: mean squared error between cos(a_i, b_i) and the gold score in [0, 1]."""
    return F.mse_loss(F.cosine_similarity(a, b, dim=-1), scores.to(a.dtype))


def cosent(a: Tensor, b: Tensor, scores: Tensor, scale: float = 20.0) -> Tensor:
    """CoSENT: for every two pairs (i, j) with gold s_i > s_j, penalise cos_j > cos_i:
    log(1 + sum exp(scale * (cos_j - cos_i))). Only the order of the gold scores matters."""
    cos = scale * F.cosine_similarity(a, b, dim=-1)  # [B]
    diff = cos[None, :] - cos[:, None]  # [i, j] = cos_j - cos_i
    wanted = scores[:, None] > scores[None, :]  # pairs where i should be above j
    diff = diff.masked_fill(~wanted, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([diff.new_zeros(1), diff]), dim=0)
