"""Storage writes are atomic and round-trip; run ids are unique and path-safe."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from rldag.storage.store import Storage, new_run_id


def test_table_round_trip_and_handle(tmp_path):
    store = Storage(f"file://{tmp_path}")
    table = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "b": ["x", "y", "z"]})
    handle = store.write_table("run/iter=0/node.parquet", table)
    assert handle.rows == 3 and handle.columns == ("a", "b")
    assert handle.uri == f"{tmp_path}/run/iter=0/node.parquet"
    assert handle.bytes == os.path.getsize(handle.uri)
    assert store.read_table("run/iter=0/node.parquet").equals(table)
    assert store.list("run") == ["iter=0"]
    assert store.list("nothing") == []


def test_relative_and_plain_paths_resolve_to_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Storage("file://./runs").root == str(tmp_path / "runs")
    assert Storage("runs").root == str(tmp_path / "runs")


def test_a_failed_write_leaves_no_file_and_no_temp(tmp_path, monkeypatch):
    store = Storage(str(tmp_path))
    store.write_text("r/x.txt", "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        store.write_text("r/x.txt", "new")
    assert store.read_text("r/x.txt") == "old"
    assert os.listdir(tmp_path / "r") == ["x.txt"]


def test_readers_never_see_a_torn_table(tmp_path):
    """A reader polling while a large table is rewritten sees the old or the new, whole."""
    store = Storage(str(tmp_path))
    small = pa.table({"v": pa.array(range(10), pa.int64())})
    big = pa.table({"v": pa.array(range(2_000_000), pa.int64())})
    store.write_table("t.parquet", small)
    seen, stop = set(), threading.Event()

    def read_loop():
        while not stop.is_set():
            seen.add(store.read_table("t.parquet").num_rows)

    reader = threading.Thread(target=read_loop)
    reader.start()
    for _ in range(3):
        store.write_table("t.parquet", big)
        store.write_table("t.parquet", small)
    stop.set()
    reader.join()
    assert seen <= {10, 2_000_000}
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def test_run_ids_are_unique_sortable_and_safe():
    ids = {new_run_id("grpo addition/v1") for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("grpo-addition-v1-") and "/" not in i for i in ids)
