"""Optimisers and learning-rate schedules for BERT-style training.

- :func:`param_groups` splits parameters into a weight-decayed group and a group without decay
  (biases, LayerNorm weights and every other 1-D parameter), as in the original BERT optimiser.
- :func:`build_optimizer` returns AdamW (decoupled weight decay, ``eps=1e-6`` as in BERT) or :class:`Lamb`.
- :class:`Lamb` is LAMB (You et al., 2019): Adam moments with a per-tensor trust ratio
  ``||w|| / ||update||``, for very large batches.
- :func:`linear_schedule` is linear warm-up to the peak learning rate, then linear decay to 0,
  as a ``torch.optim.lr_scheduler.LambdaLR`` (its ``state_dict`` resumes exactly).

Nothing here knows about BERT except the default names used to exclude parameters from decay.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch
from torch import nn

NO_DECAY_NAMES = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm", "norm.weight")


def param_groups(
    model: nn.Module,
    weight_decay: float = 0.01,
    no_decay: Iterable[str] = NO_DECAY_NAMES,
    lr_by_prefix: Mapping[str, float] | None = None,
) -> list[dict]:
    """Parameter groups: with ``weight_decay`` and without (biases, LayerNorm, any 1-D tensor), each split
    again for every name prefix in ``lr_by_prefix`` that gets its own learning rate (e.g. a freshly added
    layer that must move faster than the pre-trained weights); groups without ``"lr"`` use the optimizer's.

    Tied parameters appear once (``named_parameters`` de-duplicates them); frozen ones are left out.
    """
    no_decay = tuple(no_decay)
    lr_by_prefix = dict(lr_by_prefix or {})
    buckets: dict[tuple[str | None, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        prefix = next((k for k in lr_by_prefix if name.startswith(k)), None)
        decays = not (p.ndim < 2 or any(nd in name for nd in no_decay))
        buckets.setdefault((prefix, decays), []).append(p)
    groups = []
    for prefix in [None, *lr_by_prefix]:
        for decays in (True, False):
            params = buckets.get((prefix, decays))
            if params:
                group = {"params": params, "weight_decay": weight_decay if decays else 0.0}
                if prefix is not None:
                    group["lr"] = lr_by_prefix[prefix]
                groups.append(group)
    return groups


class Lamb(torch.optim.Optimizer):
    """LAMB: layer-wise adaptive moments for large-batch training.

    For every parameter tensor: Adam moments (with bias correction), ``update = m̂/(sqrt(v̂)+eps) + wd*w``,
    trust ratio ``r = ||w|| / ||update||`` (1 when either norm is 0), ``w -= lr * r * update``.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        max_trust_ratio: float = 10.0,
    ):
        if lr < 0 or eps < 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"invalid LAMB hyper-parameters lr={lr} betas={betas} eps={eps}")
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_trust_ratio=max_trust_ratio
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if g.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = m / (1 - b1**step)
                v_hat = v / (1 - b2**step)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm = p.norm()
                u_norm = update.norm()
                trust = torch.where(
                    (w_norm > 0) & (u_norm > 0),
                    (w_norm / u_norm).clamp(max=group["max_trust_ratio"]),
                    torch.ones_like(w_norm),
                )
                p.add_(update * trust, alpha=-group["lr"])
        return loss


def build_optimizer(
    model: nn.Module,
    name: str = "adamw",
    lr: float = 1e-4,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    fused: bool | None = None,
    lr_by_prefix: Mapping[str, float] | None = None,
) -> torch.optim.Optimizer:
    """AdamW (default) or LAMB over :func:`param_groups` of ``model`` (``lr_by_prefix``: see there).

    ``fused=None`` picks PyTorch's fused AdamW kernel when the parameters' device supports it
    (bitwise deterministic on CPU); pass ``False`` for the multi-tensor (foreach) implementation.
    """
    groups = param_groups(model, weight_decay, lr_by_prefix=lr_by_prefix)
    name = name.lower()
    if name == "adamw":
        if fused is None:
            fused = _fused_ok(model)
        kwargs = {"fused": True} if fused else {"foreach": True}
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **kwargs)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}: use 'adamw' or 'lamb'")


def _fused_ok(model: nn.Module) -> bool:
    try:
        p = next(model.parameters())
    except StopIteration:
        return False
    if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return False
    return p.device.type in ("cpu", "cuda")


class LinearWarmupDecay:
    """Multiplier for LambdaLR: ``step/warmup`` during warm-up, then linear decay to ``min_ratio`` at ``total``.

    The schedule of transformers' ``get_linear_schedule_with_warmup`` and of the original BERT's optimisation.py:
    the first update (step 0) runs at rate 0 (it only fills Adam's moments), the peak comes at step ``warmup``,
    and the rate reaches 0 at ``total``. A picklable object (not a lambda) so the scheduler's ``state_dict``
    round-trips completely.
    """

    def __init__(self, warmup_steps: int, total_steps: int, min_ratio: float = 0.0):
        self.warmup_steps = int(warmup_steps)
        self.total_steps = max(int(total_steps), 1)
        self.min_ratio = float(min_ratio)

    def __call__(self, step: int) -> float:
        if self.warmup_steps > 0 and step < self.warmup_steps:
            return step / self.warmup_steps
        span = max(self.total_steps - self.warmup_steps, 1)
        frac = 1.0 - (step - self.warmup_steps) / span
        return max(self.min_ratio, min(1.0, frac))


def linear_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 over ``warmup_steps``, then linear decay to ``min_ratio`` at ``total_steps``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, LinearWarmupDecay(warmup_steps, total_steps, min_ratio)
    )


def warmup_steps_of_ratio(ratio: float, total_steps: int) -> int:
    """Warm-up steps for a fraction of the run: ``ceil(ratio * total_steps)``, transformers' rule (its
    ``TrainingArguments.get_warmup_steps``), so a 10% warm-up of 16 steps is 2 steps, not 1."""
    if not 0 <= ratio <= 1:
        raise ValueError(f"warm-up ratio must be in [0, 1], got {ratio}")
    return int(math.ceil(ratio * total_steps))


def warmup_steps_from(warmup: float, total_steps: int) -> int:
    """``warmup`` < 1 is a fraction of ``total_steps`` (BERT used 1%); >= 1 is a step count."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return warmup_steps_of_ratio(warmup, total_steps) if warmup < 1 else int(warmup)
