"""A run asked to stop (rldag.engine.stop) starts no step, lets an iteration whose steps have
all started finish, gives up one that cannot, and raises RunStopped naming what asked and
how to resume; SIGTERM and SIGINT request it instead of ending the process."""

from __future__ import annotations

import os
import signal

import pytest

from rldag.config.errors import RunStopped
from rldag.engine.events import NodeStarted, add_listener
from rldag.engine.stop import StopRequest
from tests.support.pipelines import scoring_pipeline
from tests.support.runs import StoredRunView, drive_inline, start_run


def _stopped_at(write_yaml, dataset, tmp_path, node: str) -> tuple[RunStopped, StoredRunView]:
    """A 4-iteration in-process run asked to stop (SIGTERM's code) as `node` of iteration 1
    starts."""
    doc = scoring_pipeline(dataset, iterations=4, ray={"enabled": False})
    run = start_run(write_yaml(doc), f"storage.uri={tmp_path}/runs")

    def stop_at(event: object) -> None:
        if isinstance(event, NodeStarted) and (event.iteration, event.node) == (1, node):
            run.stop.request("SIGTERM", 143)

    remove = add_listener(stop_at)
    try:
        with pytest.raises(RunStopped) as stopped:
            drive_inline(run)
    finally:
        remove()
    return stopped.value, StoredRunView(run.storage, run.run_id)


def test_an_iteration_whose_steps_all_started_finishes(write_yaml, dataset, tmp_path):
    err, stored = _stopped_at(write_yaml, dataset, tmp_path, "advantage")  # its last node

    assert [m["iteration"] for m in stored.metrics()] == [0, 1]
    assert err.exit_code == 143
    assert str(err) == "stopped by SIGTERM after iteration 1; it has no checkpoint to resume from"


def test_an_iteration_that_cannot_finish_is_given_up(write_yaml, dataset, tmp_path):
    err, stored = _stopped_at(write_yaml, dataset, tmp_path, "prompts")  # its first node

    assert [m["iteration"] for m in stored.metrics()] == [0]
    assert stored.iterations() == [0, 1]  # prompts of iteration 1 ran; nothing after it
    assert not (stored.run_dir / "iter=1" / "answer.parquet").exists()
    assert str(err).startswith("stopped by SIGTERM after iteration 0;")


def test_a_second_request_leaves_no_grace():
    stop = StopRequest()
    assert not stop.requested and not stop.finishing(30)
    stop.request("SIGINT", 130)
    assert stop.finishing(30) and not stop.finishing(0)
    stop.request("SIGTERM", 143)  # the first reason stands
    assert (stop.reason, stop.exit_code, stop.finishing(30)) == ("SIGINT", 130, False)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_requests_a_stop_instead_of_ending_the_process(signum, code):
    before = signal.getsignal(signum)
    with StopRequest().on_signals() as stop:
        os.kill(os.getpid(), signum)
        assert (stop.reason, stop.exit_code) == (signal.Signals(signum).name, code)
    assert signal.getsignal(signum) is before
