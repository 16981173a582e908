"""torch.distributed for the trainer: the training worker group is one process group
(gloo on CPU, NCCL on GPU) and the policy is sharded with FSDP2 (`fully_shard`).

Every helper is a no-op on a single worker, so the same trainer runs in one process.
Rendezvous comes from the environment the pool workers set: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, and the timeout of the group's collectives (`faults.node_timeout_s`; torch's
default, 30 min for gloo and 10 for NCCL, where it is not set).
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.fsdp import fully_shard

from rldag.config.faults import COLLECTIVE_TIMEOUT


def world() -> tuple[int, int]:
    """(rank, world size) of this training worker."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def init_process_group(device: str) -> bool:
    """Join the training group when there is more than one worker; True if distributed."""
    rank, size = world()
    if size <= 1:
        return False
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        timeout = os.environ.get(COLLECTIVE_TIMEOUT)
        seconds = {"timeout": timedelta(seconds=float(timeout))} if timeout else {}
        dist.init_process_group(backend, rank=rank, world_size=size, **seconds)
    return True


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2: each transformer block is its own unit, the root holds the rest."""
    for module in model.modules():
        if type(module).__name__.endswith("DecoderLayer"):
            fully_shard(module)
    fully_shard(model)
    return model


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """Sum (or max) a few floats over the group."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.tolist()


def full_state_dict(model: torch.nn.Module, distributed: bool) -> dict[str, torch.Tensor]:
    """Unsharded weights on every rank (a collective when distributed)."""
    if not distributed:
        return model.state_dict()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def load_full_state_dict(
    model: torch.nn.Module, weights: dict, distributed: bool, strict: bool = True
) -> None:
    """Load unsharded weights into a (possibly sharded) model (`strict=False`: some keys)."""
    if not distributed:
        model.load_state_dict(weights, strict=strict)
        return
    options = StateDictOptions(full_state_dict=True, strict=strict)
    set_model_state_dict(model, weights, options=options)


def as_float(value: torch.Tensor) -> float:
    """A scalar tensor (possibly a DTensor) as a Python float."""
    full = getattr(value, "full_tensor", None)
    return float(full() if full is not None else value)
