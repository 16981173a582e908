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

import torch

from operators.train.batch import PackedBatch

MIN_SAVING = 0.25  # a split must remove this share of the plan's padded tokens


def padded_tokens(
    rows: int, groups: int, prompt: int, response: int, sequence: int, shared: bool
) -> int:
    """Tokens one forward processes, padding included, for `rows` rows of `groups` distinct
    prompts, longest prompt, response and prompt + response: the full sequences (plain), or
    each distinct prompt once plus the responses but their last token (shared)."""
    if shared:
        return groups * prompt + rows * max(response - 1, 1)
    return rows * sequence


class _Rows:
    """Lengths and groups of the rows of a batch, in planning order."""

    def __init__(self, batch: PackedBatch, shared: bool) -> None:
        plens, rlens = batch.prompt_lens.tolist(), batch.response_lens.tolist()
        key = [(r, p) if shared else (p + r, r) for p, r in zip(plens, rlens, strict=True)]
        self.order = sorted(range(len(key)), key=key.__getitem__)
        self.group = batch.group.tolist()
        self.plens, self.rlens, self.shared = plens, rlens, shared

    def costs(self, rows: list[int]) -> list[int]:
        """Padded tokens of each prefix ``rows[:k + 1]``."""
        grow = _Growing(self)
        return [grow.add(i) for i in rows]

    def cost(self, rows: list[int]) -> int:
        return self.costs(rows)[-1] if rows else 0


class _Growing:
    """The padded tokens of a micro-batch as rows are added to it."""

    def __init__(self, rows: _Rows) -> None:
        self.rows, self.count, self.groups = rows, 0, set()
        self.prompt = self.response = self.sequence = 0

    def add(self, i: int, commit: bool = True) -> int:
        """The cost with row ``i`` added (kept unless ``commit`` is False)."""
        r = self.rows
        p, n = r.plens[i], r.rlens[i]
        prompt, response = max(self.prompt, p), max(self.response, n)
        sequence = max(self.sequence, p + n)
        groups = len(self.groups) + (r.group[i] not in self.groups)
        cost = padded_tokens(self.count + 1, groups, prompt, response, sequence, r.shared)
        if commit:
            self.count += 1
            self.groups.add(r.group[i])
            self.prompt, self.response, self.sequence = prompt, response, sequence
        return cost


def _capped(rows: _Rows, max_tokens: int, max_rows: int) -> list[list[int]]:
    """Rows in order, cut greedily so no bin exceeds the caps (a row alone may)."""
    bins: list[list[int]] = []
    grow = None
    for i in rows.order:
        if grow is not None:
            full = max_rows and grow.count >= max_rows
            if not full and not (max_tokens and grow.add(i, commit=False) > max_tokens):
                grow.add(i)
                bins[-1].append(i)
                continue
        grow = _Growing(rows)
        grow.add(i)
        bins.append([i])
    return bins


def _best_split(rows: _Rows, bin_rows: list[int]) -> tuple[int, int]:
    """(index, tokens saved) of the cheapest cut of one bin into two."""
    left = rows.costs(bin_rows)
    right = rows.costs(bin_rows[::-1])[::-1]
    best, saved = 0, 0
    for k in range(1, len(bin_rows)):
        gain = left[-1] - left[k - 1] - right[k]
        if gain > saved:
            best, saved = k, gain
    return best, saved


def plan_micro_batches(
    batch: PackedBatch, max_tokens: int = 0, max_rows: int = 0, shared: bool = False
) -> tuple[list[torch.Tensor], int]:
    """Row indices of each micro-batch, and their padded tokens in all. Rows are ordered by
    length and cut so a micro-batch holds at most `max_rows` rows and `max_tokens` padded
    tokens (0: no limit; a longer single row goes alone), then split where a cut saves at
    least MIN_SAVING of the plan's padded tokens."""
    rows = _Rows(batch, shared)
    bins = _capped(rows, max_tokens, max_rows)
    if not bins:
        return [], 0
    while True:
        total = sum(rows.cost(b) for b in bins)
        cuts = [(_best_split(rows, b), n) for n, b in enumerate(bins)]
        (at, saved), n = max(cuts, key=lambda c: c[0][1])
        if saved < MIN_SAVING * total:
            break
        bins[n : n + 1] = [bins[n][:at], bins[n][at:]]
    return [torch.tensor(b, dtype=torch.long) for b in bins], total
