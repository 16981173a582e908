"""Which dataset rows iteration i reads: a pure function of (rows, batch size, i, seed), so a
resumed run sees the same prompts. Each epoch is a seeded permutation (or the file order)."""

from __future__ import annotations

import numpy as np


def epoch_order(rows: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """The row order of one epoch."""
    if not shuffle:
        return np.arange(rows)
    return np.random.default_rng([seed, epoch]).permutation(rows)


def batch_indices(
    rows: int, batch_size: int, iteration: int, seed: int, shuffle: bool
) -> np.ndarray:
    """Row indices of iteration `iteration`'s batch, wrapping over epochs."""
    positions = np.arange(iteration * batch_size, (iteration + 1) * batch_size)
    epochs = positions // rows
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        sel = epochs == epoch
        out[sel] = epoch_order(rows, int(epoch), seed, shuffle)[positions[sel] % rows]
    return out
