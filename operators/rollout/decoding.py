"""The decoder contract the engine's batcher runs on: ``Decoder`` (batched prefill, prefix
extension and one-token decode over a slot KV cache), the ``Prefill`` it returns, prefill in
chunks of a token budget, and right-padded id batches. ``llama_decoder`` and ``hf_decoder``
implement it; ``decoder.make_decoder`` picks one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from operators.rollout.kv_cache import SlotKVCache

__all__ = ["Decoder", "Prefill", "prefill_chunks", "right_padded"]


@dataclass
class Prefill:
    """The cache and next-token logits of a batch of prompts (right-padded to one length)."""

    kv: list[torch.Tensor]  # per layer (prompts, length, 2, kv_heads, head_dim): keys, values
    logits: torch.Tensor  # (prompts, vocab) float32, at each prompt's last token
    lengths: list[int]


class Decoder(Protocol):
    """What the batcher needs from a model."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    def prefill(self, prompts: list[list[int]]) -> Prefill: ...

    def extend(self, pasts: list[list[torch.Tensor]], suffixes: list[list[int]]) -> Prefill: ...

    def decode(
        self,
        cache: SlotKVCache,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        unique: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor: ...


def prefill_chunks(
    decoder: Decoder,
    sequences: list[list[int]],
    max_tokens: int,
    pasts: list[list[torch.Tensor]] | None = None,
) -> Iterator[tuple[int, Prefill]]:
    """Prefill ``sequences`` in consecutive chunks of about ``max_tokens`` tokens (at least one
    sequence each); yields each chunk's first index and its ``Prefill``. With ``pasts`` each
    sequence continues its cached prefix (``Decoder.extend``)."""
    start = 0
    while start < len(sequences):
        stop, tokens = start, 0
        while stop < len(sequences) and (stop == start or tokens < max_tokens):
            tokens += len(sequences[stop])
            stop += 1
        if pasts is None:
            yield start, decoder.prefill(sequences[start:stop])
        else:
            yield start, decoder.extend(pasts[start:stop], sequences[start:stop])
        start = stop


def right_padded(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    """``rows`` as one ``(len(rows), longest)`` id tensor, zero-padded on the right."""
    ids = torch.zeros((len(rows), max(len(r) for r in rows)), dtype=torch.long)
    for row, tokens in enumerate(rows):
        ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return ids.to(device)
