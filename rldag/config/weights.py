"""The `weights:` section of pipeline.yaml: how the weights edge moves the policy between
split pools (docs: Weights between pools)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rldag.config.errors import SpecError


class WeightsTransport(StrEnum):
    """How the weights edge moves the policy between split pools."""

    auto = "auto"  # collective when its group forms, else the object store (with a warning)
    collective = "collective"  # a torch.distributed broadcast group: gloo on CPU, NCCL on GPU
    object_store = "object_store"  # Ray's object store (tensors as numpy buffers)


@dataclass
class WeightsSpec:
    """The weights edge between split pools (colocated pools copy in process)."""

    transport: WeightsTransport = WeightsTransport.auto  # how the policy moves between split pools
    bucket_mb: int = 64  # collective: tensors of one dtype are flattened into buckets this big
    timeout_s: float = 60.0  # collective: most seconds to form the group or finish a sync


def check_weights(weights: WeightsSpec, where: str) -> None:
    """Every size and deadline of the edge is > 0; a SpecError naming the key otherwise."""
    for key in ("bucket_mb", "timeout_s"):
        value = getattr(weights, key)
        if value <= 0:
            raise SpecError(f"must be > 0, got {value}", path=f"weights.{key}", where=where)
