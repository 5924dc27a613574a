"""Process groups for the Trainer: who am I, wrapping the model in DDP or FSDP2, and (un)sharded state dicts.

Under ``torchrun`` (``torch.distributed`` initialised with more than one process) the Trainer wraps its model
with :func:`wrap_model`; gradients are then averaged over ranks. FSDP shards parameters, so its state dicts
are gathered to full (CPU) tensors for checkpoints and restored from full ones.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn


def dist_info() -> tuple[int, int]:
    """(rank, world size); (0, 1) when no process group is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0"))
    return 0, 1, 0


def wrap_model(
    model: nn.Module, distributed: str | None, world_size: int, device: torch.device, find_unused: bool
) -> tuple[nn.Module, bool]:
    """(the module to call, whether it is FSDP-sharded). One process, or ``distributed`` "none": unchanged."""
    if world_size <= 1 or distributed in (None, "none"):
        return model, False
    if distributed == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        return DDP(model, device_ids=ids, find_unused_parameters=find_unused), False
    if distributed == "fsdp":
        # FSDP2 (per-parameter sharding; runs on CPU with gloo too): every block of every ModuleList
        # (the Transformer layers) is its own unit, the rest (embeddings, tied heads) the root unit.
        from torch.distributed.fsdp import fully_shard

        blocks = [blk for m in model.modules() if isinstance(m, nn.ModuleList) for blk in m]
        for blk in blocks:
            fully_shard(blk)
        fully_shard(model)
        return model, True
    raise ValueError(f"distributed must be 'ddp', 'fsdp' or 'none', got {distributed!r}")


def full_model_state(model: nn.Module, fsdp: bool, every_rank: bool = False) -> dict:
    """The unsharded model state dict (a collective under FSDP: every rank must call it). Under FSDP rank 0
    alone gets it, on the CPU, unless ``every_rank`` (then each rank gets it, on the model's device)."""
    if not fsdp:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=not every_rank)
    return get_model_state_dict(model, options=options)


def full_optim_state(model: nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool) -> dict:
    """The unsharded optimizer state dict (a collective under FSDP)."""
    if not fsdp:
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=opts)


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, fsdp: bool) -> None:
    """Restore ``state["model"]`` and ``state["optimizer"]`` (full tensors) into a plain or sharded model."""
    if not fsdp:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, state["model"], options=opts)
    set_optimizer_state_dict(model, optimizer, state["optimizer"], options=opts)


def all_ranks_ok(ok: bool, world_size: int, device: torch.device) -> bool:
    """True when ``ok`` holds on every rank (one all-reduce; no communication in a single process)."""
    if world_size <= 1:
        return ok
    t = torch.tensor([0.0 if ok else 1.0], device=device)
    dist.all_reduce(t)
    return t.item() == 0
