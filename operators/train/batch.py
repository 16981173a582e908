"""Packing rollout rows into padded training tensors, and grouping them into micro-batches.

Per-token tensors are in response layout: position t of `response_ids`, `mask` and the
log-prob tensors is response token t, whose logit comes from the sequence position
prompt_len - 1 + t. Rows sharing a prompt (a GRPO group) share a `group` id, so a forward
can run their prompt once (operators.train.prefix_forward).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

TOKEN_FIELDS = ("response_ids", "mask", "old_logprobs", "ref_logprobs", "prox_logprobs")


@dataclass
class PackedBatch:
    """Right-padded prompts and responses of a batch of sequences."""

    prompt_ids: torch.Tensor  # [B, P] prompts, right-padded with the pad id
    prompt_lens: torch.Tensor  # [B]
    response_ids: torch.Tensor  # [B, R] responses (the targets), right-padded with the pad id
    response_lens: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, R] 1.0 on response tokens
    old_logprobs: torch.Tensor  # [B, R] behaviour logprobs
    advantages: torch.Tensor  # [B] one advantage per sequence
    group: torch.Tensor  # [B] index of the row's prompt among the batch's distinct prompts
    ref_logprobs: torch.Tensor | None = None  # [B, R] reference logprobs, when given
    prox_logprobs: torch.Tensor | None = None  # [B, R] current policy before the update

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


def _padded(column: pa.ChunkedArray, fill: float, dtype: np.dtype) -> tuple[np.ndarray, ...]:
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


def pack(table: pa.Table, pad_id: int, device: str = "cpu") -> PackedBatch:
    """Build a PackedBatch from a table with prompt_ids and response_ids, and
    response_logprobs, advantage and ref_logprobs when present (zeros / None otherwise)."""
    prompts, prompt_lens = _padded(table["prompt_ids"], pad_id, np.int64)
    if table.num_rows and prompt_lens.min() == 0:
        raise ValueError("every row needs a non-empty prompt_ids")
    responses, response_lens = _padded(table["response_ids"], pad_id, np.int64)
    width = responses.shape[1]
    mask = np.arange(width)[None, :] < response_lens[:, None]

    def values(name: str) -> torch.Tensor | None:
        if name not in table.column_names:
            return None
        out = _padded(table[name], 0.0, np.float32)[0]
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
        mask=torch.from_numpy(mask.astype(np.float32)).to(device),
        old_logprobs=torch.zeros(mask.shape, device=device) if old is None else old,
        advantages=advantages.to(device),
        group=torch.from_numpy(_groups(prompts, prompt_lens)).to(device),
        ref_logprobs=values("ref_logprobs"),
    )


def padded_tokens(
    rows: int, groups: int, prompt: int, response: int, sequence: int, shared: bool
) -> int:
    """Tokens one forward processes, padding included, for `rows` rows of `groups` distinct
    prompts, longest prompt, response and prompt + response: the full sequences (plain), or
    each distinct prompt once plus the responses but their last token (shared)."""
    if shared:
        return groups * prompt + rows * max(response - 1, 1)
    return rows * sequence


@dataclass
class _Bin:
    """A micro-batch being filled: its rows and what its padded size depends on."""

    rows: list[int] = field(default_factory=list)
    groups: set[int] = field(default_factory=set)
    prompt: int = 0
    response: int = 0
    sequence: int = 0

    def cost(self, shared: bool, add: tuple[int, int, int] | None = None) -> int:
        """Padded tokens, after adding a row (group, prompt len, response len) if given."""
        g, p, r = add if add is not None else (-1, 0, 0)
        return padded_tokens(
            len(self.rows) + (add is not None),
            len(self.groups) + (add is not None and g not in self.groups),
            max(self.prompt, p),
            max(self.response, r),
            max(self.sequence, p + r),
            shared,
        )

    def add(self, row: int, group: int, prompt: int, response: int) -> None:
        self.rows.append(row)
        self.groups.add(group)
        self.prompt, self.response = max(self.prompt, prompt), max(self.response, response)
        self.sequence = max(self.sequence, prompt + response)


def plan_micro_batches(
    batch: PackedBatch, max_tokens: int = 0, max_rows: int = 0, shared: bool = False
) -> tuple[list[torch.Tensor], int]:
    """Row indices of each micro-batch, and their padded tokens in all. Rows are ordered by
    length (kept together by prompt group when `shared`), then cut greedily so a micro-batch
    holds at most `max_rows` rows and `max_tokens` padded tokens (0: no limit; a longer
    single row goes alone)."""
    plens, rlens = batch.prompt_lens.tolist(), batch.response_lens.tolist()
    group = batch.group.tolist()
    if shared:  # groups by their longest response, then prompt length; rows by response
        longest: dict[int, int] = {}
        for g, r in zip(group, rlens, strict=True):
            longest[g] = max(longest.get(g, 0), r)
        key = [(longest[g], p, g, r) for g, p, r in zip(group, plens, rlens, strict=True)]
    else:
        key = [p + r for p, r in zip(plens, rlens, strict=True)]
    bins = [_Bin()]
    for i in sorted(range(len(key)), key=key.__getitem__):
        row = (group[i], plens[i], rlens[i])
        last = bins[-1]
        if last.rows and (
            (max_rows and len(last.rows) >= max_rows)
            or (max_tokens and last.cost(shared, row) > max_tokens)
        ):
            bins.append(_Bin())
        bins[-1].add(i, *row)
    bins = [b for b in bins if b.rows]
    total = sum(b.cost(shared) for b in bins)
    return [torch.tensor(b.rows, dtype=torch.long) for b in bins], total
