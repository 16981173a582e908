"""`rldag inspect` never aborts (issue 28, item 4): its process used to end with ``terminate
called without an active exception`` (exit 134) after printing everything, in a few percent of
calls; repeated calls of the real command all exit 0 with the whole output."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rldag.storage.parquet_io import footer_rows, table_from_bytes
from rldag.storage.store import Storage
from tests.support.byo import rldag

RUN = "byo-20260101-000000-abcd"


def _stored_run(root) -> Storage:
    store = Storage(str(root))
    store.write_text(f"{RUN}/pipeline.yaml", "name: byo\niterations: 2\nnodes: {score: {}}\n")
    for i in range(2):
        table = pa.table({"response": ["x" * 100] * 512, "reward": [float(i)] * 512})
        store.write_table(f"{RUN}/iter={i}/score.parquet", table)
    metrics = pa.table({"iteration": [0, 1], "reward/mean": [0.25, 0.75]})
    store.write_table(f"{RUN}/metrics.parquet", metrics)
    return store


def test_tables_and_row_counts_are_read_from_bytes(tmp_path):
    store = _stored_run(tmp_path / "runs")
    rel = f"{RUN}/iter=1/score.parquet"
    assert store.table_rows(rel) == 512
    with open(tmp_path / "runs" / rel, "rb") as f:
        assert footer_rows(f) == 512
    table = table_from_bytes(store.read_bytes(rel), columns=["reward"])
    assert table.column_names == ["reward"] and table["reward"][0].as_py() == 1.0


@pytest.mark.slow
def test_the_real_command_exits_0_every_time(tmp_path):
    _stored_run(tmp_path / "runs")
    for _ in range(15):
        result = rldag("inspect", RUN, "--storage", f"file://{tmp_path}/runs", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "terminate called" not in result.stderr
        assert "0.75" in result.stdout  # the metrics table, printed last
