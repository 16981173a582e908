"""A preallocated, slot-addressed KV cache: one slot per concurrently decoded sequence.

Per layer, keys and values live in one ``(2, capacity, slots, kv_heads, head_dim)`` tensor
(``[0]`` keys, ``[1]`` values), *position-major*: the keys of every slot at position ``p`` are
one contiguous block. A decode step reads positions ``[0, span)`` of slots ``[0, rows)``, which
is then one sequential sweep over memory instead of ``rows * kv_heads`` scattered pieces (on CPU
the scattered layout costs more in cache and TLB misses than the attention arithmetic). It is
allocated once and reused across steps, requests and calls; a sequence owns one slot and writes
position ``p`` of it at decode time. The cache only grows (by reallocating and copying) when a
request needs more slots or positions than any before it.
"""

from __future__ import annotations

import torch

__all__ = ["SlotKVCache"]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _as_slots(slots: torch.Tensor) -> torch.Tensor | slice:
    """``slots`` as a slice when it is an ascending run (a strided copy instead of a scatter)."""
    first = int(slots[0])
    run = torch.arange(first, first + len(slots), device=slots.device)
    return slice(first, first + len(slots)) if bool((slots == run).all()) else slots


def _block_repeat(rows: list[int]) -> tuple[int, int, int] | None:
    """``(first, count, repeats)`` when ``rows`` is ``first .. first + count - 1`` with each
    repeated ``repeats`` times in a row, else None."""
    repeats = next((i for i, r in enumerate(rows) if r != rows[0]), len(rows))
    count, rest = divmod(len(rows), repeats)
    if rest or rows != [rows[0] + i // repeats for i in range(len(rows))]:
        return None
    return rows[0], count, repeats


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
        shape = (2, new_cap, new_slots, self.kv_heads, self.head_dim)
        kv = []
        for layer in range(self.layers):
            t = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.slots:
                t[:, : self.capacity, : self.slots] = self.kv[layer]
            kv.append(t)
        self.kv = kv
        self.slots, self.capacity = new_slots, new_cap
        return True

    def span(self, layer: int, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of positions ``[0, length)`` of slots ``[0, rows)``:
        two ``(length, rows, kv_heads, head_dim)`` views."""
        kv = self.kv[layer][:, :length, :rows]
        return kv[0], kv[1]

    def slot_major(self, layer: int, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The same as ``span`` as ``(rows, kv_heads, length, head_dim)`` views (HF's layout)."""
        keys, values = self.span(layer, rows, length)
        return keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3)

    def store(self, layer: int, positions: torch.Tensor, kv: torch.Tensor) -> None:
        """Write ``kv`` ``(rows, 2, kv_heads, head_dim)``: row ``i`` to slot ``i`` at
        ``positions[i]``."""
        slots = torch.arange(kv.shape[0], device=kv.device)
        self.kv[layer][:, positions, slots] = kv.transpose(0, 1)

    def write(self, dst: torch.Tensor, kv: list[torch.Tensor], src: torch.Tensor) -> None:
        """Copy prompt caches into the first ``length`` positions of slots ``dst``: slot
        ``dst[i]`` gets row ``src[i]`` of the per-layer ``(prompts, length, 2, kv_heads,
        head_dim)`` tensors ``kv``. The usual admission (each prompt's samples in a run of
        slots) is one broadcast copy per layer, without gathering the rows first."""
        length = kv[0].shape[1]
        where, block = _as_slots(dst), _block_repeat(src.tolist())
        for layer in range(self.layers):
            source = kv[layer].permute(2, 1, 0, 3, 4)  # (2, length, prompts, kv_heads, dim)
            if isinstance(where, slice) and block is not None:
                first, count, repeats = block
                target = self.kv[layer][:, :length, where]
                shape = (2, length, count, repeats, self.kv_heads, self.head_dim)
                target.view(shape).copy_(source[:, :, first : first + count].unsqueeze(3))
            else:
                self.kv[layer][:, :length, where] = source.index_select(2, src)

    def move(self, src: torch.Tensor, dst: torch.Tensor, length: int) -> None:
        """Copy the first ``length`` positions of slots ``src`` into slots ``dst``."""
        for layer in range(self.layers):
            self.kv[layer][:, :length, dst] = self.kv[layer][:, :length, src]

    def nbytes(self) -> int:
        """Bytes held by the cache tensors."""
        return sum(t.numel() * t.element_size() for t in self.kv)
