"""A preallocated, slot-addressed KV cache: one row per concurrently decoded sequence.

Per layer, keys and values live in one ``(2, slots, kv_heads, capacity, head_dim)`` tensor
(``[0]`` keys, ``[1]`` values: one index write stores both, and each half keeps the
batch-major layout that batched matmuls read without copying). It is allocated once and reused
across steps, requests and calls; a sequence owns one slot and writes position ``p`` of its
slot at decode time. Slots are refilled without touching the others. The cache only grows (by
reallocating and copying) when a request needs more slots or positions than any before it.
"""

from __future__ import annotations

import torch

__all__ = ["SlotKVCache"]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class SlotKVCache:
    """Keys/values of ``layers`` attention layers for up to ``slots`` sequences."""

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self.kv: list[torch.Tensor] = []
        self.slots = 0
        self.capacity = 0

    def ensure(self, slots: int, capacity: int) -> bool:
        """Make room for ``slots`` sequences of ``capacity`` positions; keep existing contents.

        Returns True when the tensors were (re)allocated. Sizes are rounded up (slots to a
        multiple of 8, positions to 32) so that small growths do not reallocate every time.
        """
        if slots <= self.slots and capacity <= self.capacity:
            return False
        new_slots = max(self.slots, _round_up(slots, 8))
        new_cap = max(self.capacity, _round_up(capacity, 32))
        shape = (2, new_slots, self.kv_heads, new_cap, self.head_dim)
        kv = []
        for layer in range(self.layers):
            t = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.slots:
                t[:, : self.slots, :, : self.capacity] = self.kv[layer]
            kv.append(t)
        self.kv = kv
        self.slots, self.capacity = new_slots, new_cap
        return True

    def keys(self, layer: int) -> torch.Tensor:
        """Keys of ``layer``: a ``(slots, kv_heads, capacity, head_dim)`` view."""
        return self.kv[layer][0]

    def values(self, layer: int) -> torch.Tensor:
        """Values of ``layer``: a ``(slots, kv_heads, capacity, head_dim)`` view."""
        return self.kv[layer][1]

    def write(self, dst: torch.Tensor, kv: list[torch.Tensor]) -> None:
        """Copy prompt caches (per layer ``(2, len(dst), kv_heads, length, head_dim)``) into
        the first ``length`` positions of slots ``dst``."""
        length = kv[0].shape[3]
        for layer in range(self.layers):
            self.kv[layer][:, dst, :, :length] = kv[layer]

    def move(self, src: torch.Tensor, dst: torch.Tensor, length: int) -> None:
        """Copy the first ``length`` positions of slots ``src`` into slots ``dst``."""
        for layer in range(self.layers):
            self.kv[layer][:, dst, :, :length] = self.kv[layer][:, src, :, :length]

    def nbytes(self) -> int:
        """Bytes held by the cache tensors."""
        return sum(t.numel() * t.element_size() for t in self.kv)
