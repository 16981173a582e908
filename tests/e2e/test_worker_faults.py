"""Worker faults, by SIGKILL of a real Ray actor's process as its node starts, or by a call
that hangs past `faults.node_timeout_s`: a stateless worker (a score node on the environment
pool) is replaced and its rows re-run, and the run stores exactly the rows of an undisturbed
run; with no restarts left, or a stateful worker (the trainer), the run stops naming the
node and what to do."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from rldag.config.errors import RunError
from rldag.engine.events import NodeFinished, NodeStarted, add_listener
from rldag.engine.run import Run
from tests.support.deadlines import record, within
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline
from tests.support.runs import StoredRunView, drive_inline, read_run, small_default, start_run
from tests.support.stop_points import hold_node

NODES = ("prompts", "answer", "score", "advantage")


def _start(write_yaml, dataset: Path, root: Path, *overrides: str) -> Run:
    spec = scoring_pipeline(dataset, iterations=3, storage={"uri": str(root)})
    spec["nodes"]["score"]["pool"] = "environment"  # on a Ray worker, not in the driver
    return start_run(write_yaml(spec, f"{root.name}.yaml"), *overrides)


@contextmanager
def _kill_when_started(run: Run, node: str, iteration: int) -> Iterator[list[int]]:
    """SIGKILL the process of `node`'s Ray worker as the step starts; yields the pids."""
    import ray

    killed: list[int] = []

    def listener(event: object) -> None:
        if isinstance(event, NodeStarted) and (event.node, event.iteration) == (node, iteration):
            group = run.runner.placement.group_of(node).name
            pid = ray.get(run.runner.workers(group)[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
                time.sleep(0.01)
            killed.append(pid)

    remove = add_listener(listener)
    try:
        yield killed
    finally:
        remove()


def _stored(run: StoredRunView) -> dict[tuple[int, str], list[dict]]:
    return {(i, n): run.table(n, i).to_pylist() for i in range(3) for n in NODES}


def test_a_killed_stateless_worker_is_restarted_and_the_run_stores_the_same_rows(
    ray_local, dataset, write_yaml, tmp_path
):
    reference = drive_inline(_start(write_yaml, dataset, tmp_path / "reference"))
    run = _start(write_yaml, dataset, tmp_path / "killed")
    with _kill_when_started(run, "score", 1) as killed:
        stored = drive_inline(run)
    assert len(killed) == 1 and run.runner.calls.restarts_left == 2  # one of faults.max_restarts 3
    assert _stored(stored) == _stored(reference)
    assert len(stored.metrics()) == 3


def test_with_no_restarts_left_the_run_stops_naming_the_node(
    ray_local, dataset, write_yaml, tmp_path
):
    run = _start(write_yaml, dataset, tmp_path / "runs", "faults.max_restarts=0")
    with (
        _kill_when_started(run, "score", 1),
        pytest.raises(RunError, match=r"node 'score' \(iteration 1\) failed: WorkerLost"),
    ):
        drive_inline(run)
    stored = read_run(run.uri)
    assert stored.metric("iteration") == [0]
    assert not (stored.run_dir / "iter=1" / "score.parquet").exists()  # nothing half-written


NODE_TIMEOUT_S, SLACK_S = 2, 18  # slack: the killed worker's replacement starts and builds


def _hung(tmp_path: Path, *overrides: str) -> list[str]:
    """Overrides: a pass-through node on the environment pool whose call at iteration 1 hangs
    (120 s) the first time, before score; a node deadline of 2 s."""
    hold = hold_node(tmp_path / "held", "answer", "score", "rollouts", at=1)
    return [*hold, f"faults.node_timeout_s={NODE_TIMEOUT_S}", *overrides]


def test_a_call_past_the_node_deadline_is_killed_and_re_run_on_a_fresh_worker(
    request, ray_local, dataset, write_yaml, tmp_path
):
    reference = drive_inline(_start(write_yaml, dataset, tmp_path / "reference"))
    run = _start(write_yaml, dataset, tmp_path / "hung", *_hung(tmp_path))
    held: list[float] = []

    def timed(event: object) -> None:
        if isinstance(event, NodeFinished) and (event.node, event.iteration) == ("hold", 1):
            held.append(event.seconds)

    remove = add_listener(timed)
    try:
        stored = drive_inline(run)
    finally:
        remove()
    assert run.runner.calls.restarts_left == 2  # one of faults.max_restarts 3
    assert _stored(stored) == _stored(reference)  # the hold passes its rows through
    record(request, "a node call hangs: killed, re-run", NODE_TIMEOUT_S + SLACK_S, held[0])


def test_a_call_past_the_node_deadline_with_no_restarts_left_stops_the_run_naming_it(
    request, ray_local, dataset, write_yaml, tmp_path
):
    run = _start(write_yaml, dataset, tmp_path / "runs", *_hung(tmp_path, "faults.max_restarts=0"))
    said = (
        r"node 'hold' \(iteration 1\) failed: pool worker environment\[0\] "
        r"did not answer within faults.node_timeout_s = 2 s \(it was killed\); "
        r"no restarts left .*--resume"
    )
    bound = NODE_TIMEOUT_S + SLACK_S
    with within(request, "a node call hangs: stops", bound), pytest.raises(RunError, match=said):
        drive_inline(run)
    stored = read_run(run.uri)
    assert stored.metric("iteration") == [0]
    assert not (stored.run_dir / "iter=1" / "hold.parquet").exists()  # nothing half-written


def test_a_killed_trainer_stops_the_run_and_resume_completes_it_unchanged(
    ray_local, tiny_task, tmp_path
):
    from rldag.engine import checkpoints
    from rldag.engine.driver import InlineLauncher, drive

    def start(root: Path, run_id: str | None = None) -> Run:
        return start_run(ROOT / "pipeline.yaml", *small_default(tiny_task, root, 2), run_id=run_id)

    run = start(tmp_path / "killed")
    with (
        _kill_when_started(run, "train", 1),
        pytest.raises(RunError, match=r"node 'train' \(iteration 1\) failed: WorkerLost.*--resume"),
    ):
        drive_inline(run)
    assert checkpoints.latest(run.storage, run.run_id) == 0
    resumed = start(tmp_path / "killed", run.run_id)
    drive(resumed, InlineLauncher(resumed), checkpoints.resume(resumed))
    reference = drive_inline(start(tmp_path / "reference"))
    for i in range(2):
        for name in ("generate", "score", "train"):
            got = read_run(resumed.uri).table(name, i)
            want = reference.table(name, i)
            columns = [c for c in want.column_names if not c.endswith(("_per_s", "seconds"))]
            assert got.select(columns).to_pylist() == want.select(columns).to_pylist(), (i, name)
