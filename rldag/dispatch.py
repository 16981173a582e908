"""Splitting an edge table over a worker group and joining the results, in order.

`group` dispatch keeps every row of one prompt group (same `prompt_id`) on one worker, so
the n samples of a prompt are generated, executed or trained together; shards are
contiguous, zero-copy slices balanced by rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def group_boundaries(table: pa.Table, shards: int, key: str = "prompt_id") -> list[int]:
    """Row offsets [0, ..., num_rows] cutting `table` into at most `shards` contiguous parts
    that never split a run of equal `key` values (rows of a group must be adjacent)."""
    rows = table.num_rows
    if shards <= 1 or rows == 0:
        return [0, rows]
    if key in table.column_names:
        keys = table[key].to_numpy()
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    else:
        starts = np.arange(rows)
    cuts = [0]
    for target in np.linspace(0, rows, shards + 1)[1:-1]:
        cut = int(starts[np.searchsorted(starts, target)]) if target <= starts[-1] else rows
        if cut > cuts[-1]:
            cuts.append(cut)
    if cuts[-1] != rows:
        cuts.append(rows)
    return cuts


def split_table(table: pa.Table, shards: int, key: str = "prompt_id") -> list[pa.Table]:
    """Zero-copy contiguous slices of `table`, one per worker (some may be missing if there
    are fewer groups than workers)."""
    cuts = group_boundaries(table, shards, key)
    return [table.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def join_tables(parts: list[pa.Table]) -> pa.Table:
    """Concatenate worker outputs in worker order (no copy of the buffers)."""
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
