"""Splitting an edge table over a worker group and joining the results, in order.

`group` dispatch keeps every row of one prompt group (same `prompt_id`) on one worker, so
the n samples of a prompt are generated, executed or trained together; shards are
contiguous row ranges balanced by rows, sliced zero-copy by each worker. Workers send back
only the columns they add.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


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


def join_tables(parts: list[pa.Table]) -> pa.Table:
    """Concatenate worker outputs in worker order (no copy of the buffers)."""
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _same_data(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """True when two columns view the same buffers (a pass-through column, not a copy)."""
    if not a.type.equals(b.type) or a.num_chunks != b.num_chunks:
        return False
    for x, y in zip(a.chunks, b.chunks, strict=True):
        if x.offset != y.offset or len(x) != len(y):
            return False
        bx, by = x.buffers(), y.buffers()
        if [(q.address if q else 0) for q in bx] != [(q.address if q else 0) for q in by]:
            return False
    return True


def added_columns(inputs: pa.Table, output: pa.Table) -> list[str] | None:
    """Names of the columns `output` adds to (or replaces in) `inputs`, when every other
    column of `inputs` passes through untouched with the same rows; None otherwise.

    A worker then sends back only these columns and the driver re-attaches them to the
    rows it already holds, instead of shipping the whole table back through the store."""
    if output.num_rows != inputs.num_rows:
        return None
    names = set(output.column_names)
    if not set(inputs.column_names) <= names:
        return None
    kept = [c for c in inputs.column_names if _same_data(inputs[c], output[c])]
    if output.column_names[: len(kept)] != kept:
        return None
    return [c for c in output.column_names if c not in kept]


def reattach(inputs: pa.Table, added: pa.Table) -> pa.Table:
    """`inputs` with the columns a worker added (or replaced), in the operator's order."""
    out = inputs
    for name in added.column_names:
        idx = out.schema.get_field_index(name)
        out = (
            out.set_column(idx, name, added[name])
            if idx >= 0
            else out.append_column(name, added[name])
        )
    return out


def balanced_assignment(table: pa.Table, workers: int, key: str = "prompt_id") -> list[np.ndarray]:
    """Row indices per worker with prompt groups kept whole and tokens (prompt + response)
    balanced: largest groups first, each to the least-loaded worker. For nodes whose output
    order does not matter (training)."""
    rows = table.num_rows
    tokens = np.ones(rows)
    for column in ("prompt_ids", "response_ids"):
        if column in table.column_names:
            tokens += pc.list_value_length(table[column]).to_numpy(zero_copy_only=False)
    keys = table[key].to_numpy() if key in table.column_names else np.arange(rows)
    _, group = np.unique(keys, return_inverse=True)
    load = np.bincount(group, weights=tokens)
    owner = np.empty(len(load), dtype=np.int64)
    totals = np.zeros(workers)
    for g in np.argsort(-load, kind="stable"):
        owner[g] = int(np.argmin(totals))
        totals[owner[g]] += load[g]
    return [np.flatnonzero(owner[group] == w) for w in range(workers)]


def select_rows(table: pa.Table, selection: tuple[int, int] | np.ndarray | None) -> pa.Table:
    """A worker's rows: all (None), a contiguous range (zero-copy) or row indices (a copy)."""
    if selection is None:
        return table
    if isinstance(selection, tuple):
        start, stop = selection
        return table.slice(start, stop - start)
    return table.take(selection)
