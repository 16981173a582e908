"""A stopping run ends every step (issue #15): a step the orchestrator could not start leaves
no reader of its stream waiting forever, and a watcher of the run's events that raises (the
progress display did, under threads) never fails a node. Model-free and in-process."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from rldag.engine.driver import InlineLauncher, drive
from rldag.engine.events import NodeStarted, add_listener
from rldag.engine.run import Run
from rldag.engine.scheduler import Step
from tests.support.pipelines import scoring_pipeline
from tests.support.runs import drive_inline, read_run, start_run

BOUND_S = 60  # a regression waits forever: give up long before the suite's timeout


class CannotStartScore(InlineLauncher):
    """An orchestrator that fails to start iteration 1's score step (as a task run the API
    refused would), after its streaming reader, advantage, has started."""

    def launch(self, step: Step, inputs: dict) -> Future:
        if step == Step(1, "score"):
            refused: Future = Future()
            refused.set_exception(RuntimeError("the orchestrator could not start score"))
            return refused
        return super().launch(step, inputs)


def _run(write_yaml, dataset: Path, tmp_path: Path) -> Run:
    doc = scoring_pipeline(dataset, storage={"uri": f"file://{tmp_path}/runs"})
    return start_run(write_yaml(doc), "iterations=3")


def test_a_step_that_never_started_stops_the_run_with_its_error(write_yaml, dataset, tmp_path):
    run = _run(write_yaml, dataset, tmp_path)
    driving: Future = Future()

    def drive_it() -> None:
        try:
            driving.set_result(drive(run, CannotStartScore(run)))
        except BaseException as err:
            driving.set_exception(err)

    threading.Thread(target=drive_it, daemon=True).start()  # a hang must not hang the suite
    with pytest.raises(RuntimeError, match="could not start score"):
        driving.result(timeout=BOUND_S)  # before the fix: advantage waited forever
    stored = read_run(tmp_path / "runs" / run.run_id)
    assert stored.metric("iteration") == [0]  # the finished iteration is kept


def test_a_raising_event_listener_is_logged_and_the_run_goes_on(
    write_yaml, dataset, tmp_path, caplog
):
    def broken(event: object) -> None:
        if isinstance(event, NodeStarted):
            raise RuntimeError("dictionary changed size during iteration")

    run = _run(write_yaml, dataset, tmp_path)
    remove = add_listener(broken)
    try:
        with caplog.at_level(logging.WARNING, logger="rldag.engine.events"):
            drive_inline(run)
    finally:
        remove()
    assert read_run(tmp_path / "runs" / run.run_id).metric("iteration") == [0, 1, 2]
    assert "dictionary changed size" in caplog.text
