"""The CLI's progress bar shows the steps running now (several iterations when async), the
last node's rows/s, and a line per iteration with how many more are in flight."""

from __future__ import annotations

import io

from rich.console import Console

from rldag.console.progress import RunProgress
from rldag.engine.events import IterationFinished, NodeFinished, NodeStarted, RunStarted


def test_the_progress_bar_shows_the_running_steps_and_rows_per_second():
    out = io.StringIO()
    progress = RunProgress(Console(file=out, width=160))
    progress.on_event(RunStarted("r-1", "/tmp/r-1", 0, 3))
    task = progress.progress.tasks[0]
    progress.on_event(NodeStarted("r-1", 1, "generate"))
    progress.on_event(NodeStarted("r-1", 0, "train"))
    assert task.fields["node"] == "running 1:generate, 0:train  "
    progress.on_event(NodeFinished("r-1", 1, "generate", 256, 0.5, 4))
    assert task.fields["node"] == "running 0:train  1:generate 256 rows, 512 rows/s"
    assert task.total == 3
    metrics = {"reward/mean": 0.25, "timing_s/iteration": 1.5}
    progress.on_event(IterationFinished("r-1", 0, metrics, 1))
    assert "iteration   0  reward/mean=0.25  1.50s  (1 more in flight)" in out.getvalue()
    assert task.completed == 1


def test_a_resumed_run_starts_the_bar_at_its_first_iteration():
    progress = RunProgress(Console(file=io.StringIO(), width=120))
    progress.on_event(RunStarted("r-2", "/tmp/r-2", 4, 6))
    task = progress.progress.tasks[0]
    assert (task.completed, task.total) == (4, 6)
