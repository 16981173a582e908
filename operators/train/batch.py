"""Packing rollout rows into padded training tensors.

Per-token tensors are in response layout: position t of `response_ids`, `mask` and the
log-prob tensors is response token t, whose logit comes from the sequence position
prompt_len - 1 + t. Rows sharing a prompt (a GRPO group) share a `group` id, so a forward
can run their prompt once (operators.train.prefix_forward).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from rldag import InputError

TOKEN_FIELDS = ("response_ids", "mask", "old_logprobs", "ref_logprobs", "prox_logprobs")
TOKEN_FIELDS += ("token_advantages", "values", "returns")


@dataclass
class PackedBatch:
    """Right-padded prompts and responses of a batch of sequences."""

    prompt_ids: torch.Tensor  # [B, P] prompts, right-padded with the pad id
    prompt_lens: torch.Tensor  # [B]
    response_ids: torch.Tensor  # [B, R] responses (the targets), right-padded with the pad id
    response_lens: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, R] 1.0 on response tokens the model produced (response_mask)
    old_logprobs: torch.Tensor  # [B, R] behaviour logprobs
    advantages: torch.Tensor  # [B] one advantage per sequence
    group: torch.Tensor  # [B] index of the row's prompt among the batch's distinct prompts
    ref_logprobs: torch.Tensor | None = None  # [B, R] reference logprobs, when given
    prox_logprobs: torch.Tensor | None = None  # [B, R] current policy before the update
    token_advantages: torch.Tensor | None = None  # [B, R] per-token advantages, when given
    values: torch.Tensor | None = None  # [B, R] a critic's values at rollout time, when given
    returns: torch.Tensor | None = None  # [B, R] the critic's targets (set by the critic)

    @property
    def rows(self) -> int:
        return int(self.prompt_ids.shape[0])

    @property
    def groups(self) -> int:
        return int(self.group.max()) + 1 if self.rows else 0

    def select(self, index: torch.Tensor) -> PackedBatch:
        """The rows at `index` (in that order), padding trimmed to their longest prompt and
        response, group ids renumbered from 0."""
        index = index.to(self.prompt_ids.device)
        width = int(self.response_lens[index].max())
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                value = value[index]
                if f.name in TOKEN_FIELDS:
                    value = value[:, :width]
            out[f.name] = value
        out["prompt_ids"] = out["prompt_ids"][:, : int(out["prompt_lens"].max())]
        out["group"] = torch.unique(out["group"], return_inverse=True)[1]
        return PackedBatch(**out)

    def slice(self, start: int, stop: int) -> PackedBatch:
        """Rows [start, stop)."""
        return self.select(torch.arange(start, min(stop, self.rows)))


def padded(column: pa.ChunkedArray, fill: float, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """A list column as a right-padded [rows, longest] array, and the lists' lengths."""
    lists = column.combine_chunks()
    lens = pc.fill_null(pc.list_value_length(lists), 0).to_numpy().astype(np.int64)
    flat = lists.flatten().to_numpy(zero_copy_only=False).astype(dtype)
    out = np.full((len(lens), int(lens.max(initial=0))), fill, dtype)
    rows = np.repeat(np.arange(len(lens)), lens)
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    out[rows, cols] = flat
    return out, lens


def _groups(prompts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Index of each row's prompt among the distinct prompts."""
    key = np.concatenate([lens[:, None], prompts], axis=1)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1)


def aligned(table: pa.Table, name: str, lens: np.ndarray, width: int) -> np.ndarray | None:
    """A per-token column as [rows, width] float32, or None when absent; every row's list
    must be as long as its response_ids."""
    if name not in table.column_names:
        return None
    values, got = padded(table[name], 0.0, np.float32)
    bad = np.flatnonzero(got != lens)
    if len(bad):
        row = int(bad[0])
        raise InputError(
            f"column '{name}' row {row} has {got[row]} values for {lens[row]} response tokens"
        )
    return np.pad(values, ((0, 0), (0, width - values.shape[1])))


def pack(table: pa.Table, pad_id: int, device: str = "cpu") -> PackedBatch:
    """Build a PackedBatch from a table with prompt_ids and response_ids, and
    response_logprobs, advantage, token_advantage, response_mask, values and ref_logprobs
    when present (zeros / None otherwise). `response_mask` (1 model token, 0 environment token)
    multiplies the loss mask."""
    prompts, prompt_lens = padded(table["prompt_ids"], pad_id, np.int64)
    if table.num_rows and prompt_lens.min() == 0:
        raise ValueError("every row needs a non-empty prompt_ids")
    responses, response_lens = padded(table["response_ids"], pad_id, np.int64)
    width = responses.shape[1]
    mask = (np.arange(width)[None, :] < response_lens[:, None]).astype(np.float32)
    response_mask = aligned(table, "response_mask", response_lens, width)
    if response_mask is not None:
        mask = mask * response_mask
    token_advantages = aligned(table, "token_advantage", response_lens, width)
    values_at_rollout = aligned(table, "values", response_lens, width)

    def values(name: str) -> torch.Tensor | None:
        if name not in table.column_names:
            return None
        out = padded(table[name], 0.0, np.float32)[0]
        return torch.from_numpy(np.pad(out, ((0, 0), (0, width - out.shape[1])))).to(device)

    old = values("response_logprobs")
    advantages = torch.zeros(table.num_rows)
    if "advantage" in table.column_names:
        advantages = torch.tensor(table["advantage"].to_numpy(), dtype=torch.float32)
    return PackedBatch(
        prompt_ids=torch.from_numpy(prompts).to(device),
        prompt_lens=torch.from_numpy(prompt_lens).to(device),
        response_ids=torch.from_numpy(responses).to(device),
        response_lens=torch.from_numpy(response_lens).to(device),
        mask=torch.from_numpy(mask).to(device),
        old_logprobs=torch.zeros(mask.shape, device=device) if old is None else old,
        advantages=advantages.to(device),
        group=torch.from_numpy(_groups(prompts, prompt_lens)).to(device),
        ref_logprobs=values("ref_logprobs"),
        token_advantages=_tensor(token_advantages, device),
        values=_tensor(values_at_rollout, device),
    )


def _tensor(values: np.ndarray | None, device: str) -> torch.Tensor | None:
    return None if values is None else torch.from_numpy(values).to(device)
