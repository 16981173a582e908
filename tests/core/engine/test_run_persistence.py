"""A run stores its edge tables in the background and never loses a failed write."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rldag.config.errors import RunError
from rldag.engine.scheduler import Step
from tests.support.pipelines import scoring_pipeline


def execute_iteration(run, iteration: int) -> list:
    """Every step of one iteration, in graph order, each on its inputs' handles."""
    handles = {}
    for name, node in run.graph.nodes.items():
        step = Step(iteration, name)
        run.open_step(step)
        inputs = {port: handles[up] for port, up in node.inputs.items()}
        handles[name] = run.execute(step, inputs)
    return list(handles.values())


def test_edges_are_stored_in_the_background_and_failures_name_the_file(
    write_yaml, dataset, tmp_path, monkeypatch
):
    """Edge tables are written off the critical path; finish_iteration waits for them, and a
    write that fails turns into a RunError naming the file (nothing is silently lost)."""
    from rldag.compute.in_process import InProcessPools
    from rldag.storage.store import Storage
    from tests.support.runs import start_run

    doc = scoring_pipeline(dataset, storage={"uri": f"file://{tmp_path}/runs"})
    run = start_run(write_yaml(doc), "ray.enabled=false", runner=InProcessPools())
    try:
        handles = execute_iteration(run, 0)
        run.finish_iteration(0, 0.0)
        for handle in handles:  # every handle points at a complete table once finished
            assert pq.read_table(handle.uri).num_rows == handle.rows
        real = Storage.write_table

        def broken(self, rel, table):
            if rel.endswith("iter=1/score.parquet"):
                raise OSError("disk full")
            return real(self, rel, table)

        monkeypatch.setattr(Storage, "write_table", broken)
        execute_iteration(run, 1)
        with pytest.raises(RunError, match=r"iter=1/score\.parquet.*disk full"):
            run.finish_iteration(1, 0.0)
    finally:
        run.close()
