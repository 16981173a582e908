"""Per-slot decoding state of the continuous batcher, as preallocated tensors.

One entry per KV-cache slot: where the next token goes (``pos``), the token to feed
(``token``), how many tokens were generated (``count``), its dedup class (``cls``), the
sequence's RNG key and its
precomputed uniforms (``unif``), its sampling parameters, its stop-token table, whether it is
live (``alive``), and its generated tokens and log-probs so far (``out_tok``, ``out_lp``).
Everything is written with one indexed copy per field, so admitting or releasing many slots
costs a handful of tensor ops.
"""

from __future__ import annotations

import torch

from operators.rollout.rng import sample_keys, uniforms

__all__ = ["SlotState"]

_LONG = ("pos", "token", "count", "key", "top_k", "max_new", "cls")
_FIELDS = (*_LONG, "temperature", "top_p", "alive", "stop_tab", "out_tok", "out_lp", "unif")


class SlotState:
    """The decoding state of every slot; grows (keeping contents) when more room is needed."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.shape = (0, 0, 0)  # slots, max new tokens, stop-id width
        self.grow(0, 1, 1)

    @property
    def slots(self) -> int:
        return self.shape[0]

    def grow(self, slots: int, max_new: int, width: int) -> None:
        """Room for ``slots`` slots, ``max_new`` tokens each and ``width`` stop ids."""
        old = self.shape
        shape = (max(slots, old[0]), max(max_new, old[1]), max(width, old[2]))
        if shape == old:
            return
        dev, n = self.device, shape[0]
        fresh = {name: torch.zeros(n, dtype=torch.long, device=dev) for name in _LONG}
        fresh["temperature"] = torch.ones(n, dtype=torch.float32, device=dev)
        fresh["top_p"] = torch.ones(n, dtype=torch.float32, device=dev)
        fresh["alive"] = torch.zeros(n, dtype=torch.bool, device=dev)
        fresh["stop_tab"] = torch.full((n, shape[2]), -1, dtype=torch.long, device=dev)
        for name in ("out_tok", "out_lp", "unif"):
            dtype = torch.long if name == "out_tok" else torch.float32
            fresh[name] = torch.zeros((n, shape[1]), dtype=dtype, device=dev)
        for name, tensor in fresh.items():
            if old[0]:
                prev = getattr(self, name)
                tensor[tuple(slice(0, s) for s in prev.shape)] = prev
            setattr(self, name, tensor)
        self.shape = shape

    def admit(self, slots: list[int], rows: dict[str, list]) -> None:
        """Start sequences in ``slots``; ``rows`` holds one value per slot for ``pos``, ``temp``,
        ``top_k``, ``top_p``, ``max_new``, ``key`` (the group key), ``sample``, ``stop``
        (a list of stop ids) and ``cls`` (the dedup class, ``operators.rollout.dedup``)."""
        dev = self.device
        slot = torch.tensor(slots, device=dev)
        self.pos[slot] = torch.tensor(rows["pos"], device=dev)
        self.count[slot] = 0
        self.token[slot] = 0
        self.temperature[slot] = torch.tensor(rows["temp"], dtype=torch.float32, device=dev)
        self.top_k[slot] = torch.tensor(rows["top_k"], device=dev)
        self.top_p[slot] = torch.tensor(rows["top_p"], dtype=torch.float32, device=dev)
        self.max_new[slot] = torch.tensor(rows["max_new"], device=dev)
        keys = sample_keys(
            torch.tensor(rows["key"], device=dev), torch.tensor(rows["sample"], device=dev)
        )
        self.key[slot] = keys
        steps = torch.arange(max(rows["max_new"]), device=dev)
        self.unif[slot, : steps.shape[0]] = uniforms(keys.unsqueeze(-1), steps)
        width = self.stop_tab.shape[1]
        table = [ids + [-1] * (width - len(ids)) for ids in rows["stop"]]
        self.stop_tab[slot] = torch.tensor(table, dtype=torch.long, device=dev)
        self.cls[slot] = torch.tensor(rows["cls"], device=dev)
        self.alive[slot] = True

    def release(self, slots: torch.Tensor) -> None:
        """Mark ``slots`` free; a free slot decodes harmlessly at position 0 until reused."""
        self.pos[slots] = 0
        self.count[slots] = 0
        self.token[slots] = 0
        self.alive[slots] = False

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy the state of slots ``src`` to ``dst`` and free ``src``."""
        for name in _FIELDS:
            tensor = getattr(self, name)
            tensor[dst] = tensor[src]
        self.release(src)
