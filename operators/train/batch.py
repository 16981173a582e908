"""Packing rollout rows (prompt_ids + response_ids) into right-padded training tensors.

Position t of `targets`/`mask`/`old_logprobs` is the token at t+1 of the sequence, so that
`logits[:, :-1]` line up with them; `mask` is 1 exactly on response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import torch


@dataclass
class PackedBatch:
    """Right-padded tensors for a batch of sequences."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    targets: torch.Tensor  # [B, L-1] next tokens
    mask: torch.Tensor  # [B, L-1] 1 on response tokens
    old_logprobs: torch.Tensor  # [B, L-1] behaviour logprobs on response tokens
    advantages: torch.Tensor  # [B] one advantage per sequence

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    def slice(self, start: int, stop: int) -> PackedBatch:
        """Rows [start, stop) with padding trimmed to their longest sequence."""
        attn = self.attention_mask[start:stop]
        length = int(attn.sum(-1).max())
        return PackedBatch(
            self.input_ids[start:stop, :length],
            attn[:, :length],
            self.targets[start:stop, : length - 1],
            self.mask[start:stop, : length - 1],
            self.old_logprobs[start:stop, : length - 1],
            self.advantages[start:stop],
        )


def pack(table: pa.Table, pad_id: int, device: str = "cpu") -> PackedBatch:
    """Build a PackedBatch from a table with prompt_ids, response_ids, response_logprobs,
    advantage."""
    prompts = table["prompt_ids"].to_pylist()
    responses = table["response_ids"].to_pylist()
    behaviour = table["response_logprobs"].to_pylist()
    rows = len(prompts)
    length = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    input_ids = torch.full((rows, length), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, length), dtype=torch.long)
    mask = torch.zeros((rows, length - 1))
    old = torch.zeros((rows, length - 1))
    for i, (p, r, lp) in enumerate(zip(prompts, responses, behaviour, strict=True)):
        n = len(p) + len(r)
        input_ids[i, :n] = torch.tensor(p + r, dtype=torch.long)
        attention[i, :n] = 1
        mask[i, len(p) - 1 : n - 1] = 1.0
        old[i, len(p) - 1 : n - 1] = torch.tensor(lp, dtype=torch.float32)
    advantages = torch.tensor(table["advantage"].to_numpy(), dtype=torch.float32)
    return PackedBatch(
        input_ids.to(device),
        attention.to(device),
        input_ids[:, 1:].to(device),
        mask.to(device),
        old.to(device),
        advantages.to(device),
    )
