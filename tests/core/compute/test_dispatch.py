"""Dispatch by prompt group: shards are contiguous, never split a group, keep row order and
stay balanced; joining them gives the table back."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rldag.compute.dispatch import (
    added_columns,
    balanced_assignment,
    group_boundaries,
    join_tables,
    reattach,
)


def split_table(table: pa.Table, shards: int) -> list[pa.Table]:
    cuts = group_boundaries(table, shards)
    return [table.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def test_random_tables_never_split_a_group_and_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = rng.integers(1, 9, size=rng.integers(1, 40))
        ids = np.repeat(np.arange(len(sizes)), sizes)
        table = pa.table({"prompt_id": ids, "row": np.arange(len(ids))})
        shards = int(rng.integers(1, 9))
        parts = split_table(table, shards)
        assert 1 <= len(parts) <= shards
        assert all(p.num_rows > 0 for p in parts)
        assert join_tables(parts).equals(table)
        owners = {}
        for i, part in enumerate(parts):
            for pid in set(part["prompt_id"].to_pylist()):
                assert owners.setdefault(pid, i) == i  # a group lives on one shard
        if shards <= len(sizes):
            largest = max(p.num_rows for p in parts)
            assert largest <= len(ids) / shards + sizes.max()  # balanced up to one group


def test_even_groups_split_evenly():
    table = pa.table({"prompt_id": np.repeat(np.arange(8), 4)})
    assert group_boundaries(table, 4) == [0, 8, 16, 24, 32]
    assert group_boundaries(table, 1) == [0, 32]


def test_tables_without_prompt_ids_split_by_rows():
    table = pa.table({"x": np.arange(10)})
    assert [p.num_rows for p in split_table(table, 3)] == [4, 3, 3]


def test_split_is_zero_copy():
    table = pa.table({"prompt_id": np.repeat(np.arange(4), 2), "v": np.arange(8.0)})
    parts = split_table(table, 2)
    base = table["v"].chunks[0].buffers()[1].address
    assert parts[1]["v"].chunks[0].buffers()[1].address == base  # same buffer, offset slice


def test_only_added_columns_travel_back_and_reattach_in_order():
    rows = pa.table({"prompt_id": np.arange(4), "response": list("abcd")})
    out = rows.append_column("reward", pa.array([1.0, 0.0, 1.0, 0.0], pa.float32()))
    assert added_columns(rows, out) == ["reward"]
    assert reattach(rows, out.select(["reward"])).equals(out)
    replaced = out.set_column(1, "response", pa.array(list("wxyz")))
    assert added_columns(rows, replaced) == ["response", "reward"]
    assert reattach(rows, replaced.select(["response", "reward"])).equals(replaced)
    expanded = pa.concat_tables([out, out])  # row-changing operators ship the whole table
    assert added_columns(rows, expanded) is None
    assert added_columns(rows, out.drop_columns(["response"])) is None


def test_balanced_assignment_keeps_groups_whole_and_balances_tokens():
    rng = np.random.default_rng(1)
    for _ in range(50):
        groups = int(rng.integers(4, 30))
        ids = np.repeat(np.arange(groups), 4)
        lengths = rng.integers(1, 50, size=len(ids))
        table = pa.table(
            {
                "prompt_id": ids,
                "prompt_ids": pa.array([[1] * 3 for _ in ids]),
                "response_ids": pa.array([[1] * int(n) for n in lengths]),
            }
        )
        workers = int(rng.integers(2, 5))
        parts = balanced_assignment(table, workers)
        assert sorted(np.concatenate(parts).tolist()) == list(range(len(ids)))
        for part in parts:
            assert all(np.isin(ids[ids == g], ids[part]).all() for g in set(ids[part]))
        tokens = [(lengths[p] + 4).sum() for p in parts]
        group_max = max((lengths[ids == g] + 4).sum() for g in range(groups))
        assert max(tokens) - min(tokens) <= group_max  # LPT: within one group's tokens
