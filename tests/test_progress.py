"""The CLI's progress bar shows the node running now and the last node's rows/s."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from rldag.progress import RunProgress


def test_the_progress_bar_shows_the_running_node_and_its_rows_per_second():
    run = SimpleNamespace(
        run_id="r-1", uri="/tmp/r-1", loaded=SimpleNamespace(spec=SimpleNamespace(iterations=3))
    )
    progress = RunProgress(Console(file=io.StringIO(), width=120))
    progress.on_event("start", run)
    task = progress.progress.tasks[0]
    progress.on_event("node", run, 1, "generate")
    assert task.fields["node"] == "iteration 1: generate …"
    progress.on_event("node_done", run, 1, "generate", 256, 0.5)
    assert task.fields["node"] == "iteration 1: generate 256 rows, 512 rows/s"
    assert task.total == 3


def test_a_resumed_run_starts_the_bar_at_its_first_iteration():
    run = SimpleNamespace(
        run_id="r-2", uri="/tmp/r-2", loaded=SimpleNamespace(spec=SimpleNamespace(iterations=6))
    )
    progress = RunProgress(Console(file=io.StringIO(), width=120))
    progress.on_event("start", run, 4)
    task = progress.progress.tasks[0]
    assert (task.completed, task.total) == (4, 6)
