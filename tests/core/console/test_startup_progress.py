"""`rldag run` says what it does before the first iteration (issue 28, item 9): each startup
step with the seconds since it started, the run id as soon as its directory is claimed (not
again when the iterations start)."""

from __future__ import annotations

import io

from rich.console import Console

from rldag.console.progress import RunProgress
from rldag.engine.events import RunStarted, Starting, emit


def test_startup_steps_and_the_run_id_are_printed_before_the_first_iteration():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    with RunProgress(console) as progress:
        progress.starting("validating pipeline.yaml")
        emit(Starting("claimed the run directory", "byo-1", "file:///runs/byo-1"))
        emit(Starting("starting Ray"))
        emit(Starting("building workers (rollout x1, training x1) and loading their models"))
        emit(RunStarted("byo-1", "file:///runs/byo-1", 0, 1))
    text = out.getvalue()
    steps = ["validating pipeline.yaml", "run id: byo-1", "starting Ray", "building workers"]
    at = [text.index(step) for step in steps]
    assert at == sorted(at), text
    assert text.count("run id: byo-1") == 1
    assert "s validating pipeline.yaml" in text  # with the seconds since the start
