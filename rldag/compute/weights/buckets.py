"""Weights as buckets: a state dict's tensors grouped by dtype into flat runs of about a
given size, flattened into one buffer per bucket and unflattened back into views by name.
Names that share one tensor (tied embeddings) share one slot, so they travel once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TensorSlot:
    """One tensor of a bucket: the state-dict names that share it, its shape and offset."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    offset: int  # in elements of the bucket's dtype
    numel: int


@dataclass(frozen=True)
class Bucket:
    """A flat run of tensors of one dtype, moved in one piece."""

    dtype: str  # a torch dtype's name, e.g. "bfloat16"
    numel: int
    itemsize: int  # bytes per element
    slots: tuple[TensorSlot, ...]

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def plan_buckets(weights: Mapping[str, torch.Tensor], bucket_bytes: int) -> tuple[Bucket, ...]:
    """Group the tensors by dtype (in state-dict order) into buckets of at most
    `bucket_bytes` (a larger tensor gets a bucket of its own); names aliasing one tensor
    (same storage, offset, shape and strides) share a slot."""
    shared: dict[tuple, list[str]] = {}
    first: dict[tuple, torch.Tensor] = {}
    for name, tensor in weights.items():
        key = (
            tensor.dtype,
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tensor.stride(),
        )
        shared.setdefault(key, []).append(name)
        first.setdefault(key, tensor)
    by_dtype: dict[str, list[tuple[tuple[str, ...], torch.Tensor]]] = {}
    for key, tensor in first.items():
        dtype = str(tensor.dtype).removeprefix("torch.")
        by_dtype.setdefault(dtype, []).append((tuple(shared[key]), tensor))
    buckets: list[Bucket] = []
    for dtype, tensors in by_dtype.items():
        itemsize = tensors[0][1].element_size()
        slots: list[TensorSlot] = []
        offset = 0
        for names, tensor in tensors:
            if slots and (offset + tensor.numel()) * itemsize > bucket_bytes:
                buckets.append(Bucket(dtype, offset, itemsize, tuple(slots)))
                slots, offset = [], 0
            slots.append(TensorSlot(names, tuple(tensor.shape), offset, tensor.numel()))
            offset += tensor.numel()
        buckets.append(Bucket(dtype, offset, itemsize, tuple(slots)))
    return tuple(buckets)


def flatten_into(bucket: Bucket, weights: Mapping[str, torch.Tensor], out: torch.Tensor) -> None:
    """Copy the bucket's tensors from `weights` into the flat buffer `out` (any device)."""
    import torch

    parts = [weights[s.names[0]].detach().reshape(-1).to(out.device) for s in bucket.slots]
    torch.cat(parts, out=out)


def unflatten(bucket: Bucket, buffer: torch.Tensor) -> dict[str, torch.Tensor]:
    """The bucket's tensors by name, as views of `buffer` (tied names share one view)."""
    out: dict[str, torch.Tensor] = {}
    for slot in bucket.slots:
        view = buffer[slot.offset : slot.offset + slot.numel].view(slot.shape)
        out.update(dict.fromkeys(slot.names, view))
    return out
