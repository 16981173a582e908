"""Identical sequences are decoded once.

The `n` samples of a GRPO group share their prompt, and as long as two of them have also
sampled the same tokens they are the same sequence: same keys and values, same next-token
logits (only their random draws differ). Each slot carries a class id; slots of one class hold
identical sequences. A group's samples start in one class when admitted; after every sampled
token a class splits by the token each member drew (`relabel`). A decode step then runs the
matmuls once per class (`plan`) and hands the result to every member; attention, which reads
each slot's own cache, still runs per slot. Sequences only ever split, never merge, so the
bookkeeping is exact (no hashing). Free slots in the decoded range share one class. While no
live group decodes several samples (agent turns, n=1) every class has one member and the
batcher skips both.
"""

from __future__ import annotations

import torch

__all__ = ["plan", "relabel"]

TOKEN_BITS = 20  # vocabularies below 2**20 tokens: class ids stay far below 2**63
MAX_SHARE = 0.85  # deduplicate a step only when it drops at least 15 % of its rows


def relabel(classes: torch.Tensor, tokens: torch.Tensor, base: int) -> tuple[torch.Tensor, int]:
    """New class ids (from `base` on) after each slot of `classes` drew `tokens`: equal ids
    exactly when the old ids and the tokens are equal. Returns the ids and the next free id."""
    _, inverse = torch.unique((classes << TOKEN_BITS) | tokens, sorted=False, return_inverse=True)
    return inverse + base, base + int(inverse.max()) + 1 if inverse.numel() else base


def plan(classes: torch.Tensor, alive: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """For a decode step over these slots: one representative row per class and each row's
    class index (``rows == reps[inverse]`` in content), or None when too few rows repeat."""
    key = torch.where(alive, classes, -1)  # free slots: one (discarded) class
    _, inverse = torch.unique(key, return_inverse=True)
    count = int(inverse.max()) + 1
    if count > MAX_SHARE * key.shape[0]:
        return None
    rows = torch.arange(key.shape[0], device=key.device)
    reps = torch.full((count,), key.shape[0], dtype=torch.long, device=key.device)
    return reps.scatter_reduce_(0, inverse, rows, "amin"), inverse
