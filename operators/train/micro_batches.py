"""Cutting a training batch into micro-batches by padded tokens.

Rows are ordered by length, cut greedily under a token and a row cap, and each resulting
micro-batch is split further where that removes at least `MIN_SAVING` of the whole plan's
padded tokens. RL batches are skewed (most GRPO answers end early, a few run long), so one
long row would otherwise pad hundreds of short ones; a split costs one more forward/backward,
which only pays when it removes a large share of the work.

In shared-prefix mode a micro-batch runs each of its distinct prompts once; a group whose rows
land in two micro-batches runs its prompt in both (counted in the cost).
"""

from __future__ import annotations

import numpy as np
import torch

from operators.train.batch import PackedBatch

MIN_SAVING = 0.25  # a split must remove this share of the plan's padded tokens


def _prefix_costs(rows: np.ndarray, lens: tuple[np.ndarray, ...], shared: bool) -> np.ndarray:
    """Padded tokens of each prefix ``rows[:k + 1]`` (``lens``: prompt lengths, response
    lengths and group ids of all rows)."""
    plens, rlens, group = (a[rows] for a in lens)
    count = np.arange(1, len(rows) + 1)
    if not shared:
        return count * np.maximum.accumulate(plens + rlens)
    first = np.zeros(len(rows), dtype=np.int64)
    first[np.unique(group, return_index=True)[1]] = 1  # where each group first appears
    response = np.maximum(np.maximum.accumulate(rlens) - 1, 1)
    return np.cumsum(first) * np.maximum.accumulate(plens) + count * response


def _capped(order: np.ndarray, lens: tuple, shared: bool, max_tokens: int, max_rows: int):
    """Rows in order, cut greedily so no bin exceeds the caps (a row alone may)."""
    bins, start = [], 0
    while start < len(order):
        rest = order[start:]
        fits = np.ones(len(rest), dtype=bool)
        if max_tokens:
            fits &= _prefix_costs(rest, lens, shared) <= max_tokens
        if max_rows:
            fits[max_rows:] = False
        size = max(1, int(np.argmin(fits)) if not fits.all() else len(rest))
        bins.append(rest[:size])
        start += size
    return bins


def _best_split(rows: np.ndarray, lens: tuple, shared: bool) -> tuple[int, int]:
    """(index, tokens saved) of the cheapest cut of one bin into two."""
    if len(rows) < 2:
        return 0, 0
    left = _prefix_costs(rows, lens, shared)
    right = _prefix_costs(rows[::-1], lens, shared)[::-1]
    gain = left[-1] - left[:-1] - right[1:]  # cut before row k + 1
    k = int(np.argmax(gain))
    return k + 1, int(gain[k])


def plan_micro_batches(
    batch: PackedBatch, max_tokens: int = 0, max_rows: int = 0, shared: bool = False
) -> tuple[list[torch.Tensor], int]:
    """Row indices of each micro-batch, and their padded tokens in all. Rows are ordered by
    length and cut so a micro-batch holds at most `max_rows` rows and `max_tokens` padded
    tokens (0: no limit; a longer single row goes alone), then split where a cut saves at
    least MIN_SAVING of the plan's padded tokens."""
    plens, rlens = batch.prompt_lens.cpu().numpy(), batch.response_lens.cpu().numpy()
    lens = (plens, rlens, batch.group.cpu().numpy())
    keys = (plens, rlens) if shared else (rlens, plens + rlens)  # lexsort: last key first
    bins, total = _plan(np.lexsort(keys), lens, shared, max_tokens, max_rows)
    return [torch.from_numpy(b.astype(np.int64)) for b in bins], total


def _plan(order: np.ndarray, lens: tuple, shared: bool, max_tokens: int, max_rows: int):
    """Bins of rows (cut greedily under the caps, then split where it pays) and their cost."""
    bins = _capped(order, lens, shared, max_tokens, max_rows)
    while True:
        costs = [int(_prefix_costs(b, lens, shared)[-1]) for b in bins]
        total = sum(costs)
        cuts = [_best_split(b, lens, shared) for b in bins]
        n = max(range(len(bins)), key=lambda i: cuts[i][1], default=0)
        if not bins or cuts[n][1] < MIN_SAVING * total:
            break
        bins[n : n + 1] = [bins[n][: cuts[n][0]], bins[n][cuts[n][0] :]]
    return bins, total


def plan_sequences(lengths: np.ndarray, max_tokens: int, max_rows: int = 0) -> list[np.ndarray]:
    """Micro-batches of whole sequences of these lengths (forward only: a reward model), by
    the same plan: ordered by length, at most `max_tokens` padded tokens and `max_rows` rows
    each (0: no limit), split where a cut saves MIN_SAVING of the padded tokens."""
    lengths = np.asarray(lengths, dtype=np.int64)
    lens = (lengths, np.zeros_like(lengths), np.arange(len(lengths)))
    return _plan(np.argsort(lengths, kind="stable"), lens, False, max_tokens, max_rows)[0]
