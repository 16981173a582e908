"""Packing rollout rows (prompt_ids + response_ids) into right-padded training tensors.

Position t of `targets`/`mask`/the log-prob tensors is the token at t+1 of the sequence, so
that `logits[:, :-1]` line up with them; `mask` is 1 exactly on response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

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
    ref_logprobs: torch.Tensor | None = None  # [B, L-1] reference logprobs, when given
    prox_logprobs: torch.Tensor | None = None  # [B, L-1] current policy before the update

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    def slice(self, start: int, stop: int) -> PackedBatch:
        """Rows [start, stop) with padding trimmed to their longest sequence."""
        length = int(self.attention_mask[start:stop].sum(-1).max())
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value.dim() == 1:
                out[f.name] = None if value is None else value[start:stop]
            else:
                width = length if f.name in ("input_ids", "attention_mask") else length - 1
                out[f.name] = value[start:stop, :width]
        return PackedBatch(**out)


def _response_values(rows: list, prompts: list, length: int) -> torch.Tensor:
    """Per-response-token values placed at their target positions."""
    out = torch.zeros((len(prompts), length - 1))
    for i, (p, values) in enumerate(zip(prompts, rows, strict=True)):
        out[i, len(p) - 1 : len(p) - 1 + len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


def pack(table: pa.Table, pad_id: int, device: str = "cpu") -> PackedBatch:
    """Build a PackedBatch from a table with prompt_ids and response_ids, and
    response_logprobs, advantage and ref_logprobs when present (zeros / None otherwise)."""
    prompts = table["prompt_ids"].to_pylist()
    responses = table["response_ids"].to_pylist()
    rows = len(prompts)
    length = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    input_ids = torch.full((rows, length), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, length), dtype=torch.long)
    mask = torch.zeros((rows, length - 1))
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        n = len(p) + len(r)
        input_ids[i, :n] = torch.tensor(p + r, dtype=torch.long)
        attention[i, :n] = 1
        mask[i, len(p) - 1 : n - 1] = 1.0
    old = torch.zeros((rows, length - 1))
    if "response_logprobs" in table.column_names:
        old = _response_values(table["response_logprobs"].to_pylist(), prompts, length)
    ref = None
    if "ref_logprobs" in table.column_names:
        ref = _response_values(table["ref_logprobs"].to_pylist(), prompts, length).to(device)
    advantages = torch.zeros(rows)
    if "advantage" in table.column_names:
        advantages = torch.tensor(table["advantage"].to_numpy(), dtype=torch.float32)
    return PackedBatch(
        input_ids.to(device),
        attention.to(device),
        input_ids[:, 1:].to(device),
        mask.to(device),
        old.to(device),
        advantages.to(device),
        ref,
    )
