"""`rldag run` asked to stop, by SIGTERM, by SIGINT or by a cancel in Prefect, stops at a safe
point. The run is held in the middle of iteration 1 by a node on the environment pool (a Ray
actor sleeping 120 s: tests/support/stop_points.py), after iteration 0's checkpoint. Each
stop gives the exit code that says what asked (143, 130, 130), gives the held call up at
once, leaves no process it started alive (Ray and its actors; in the SIGTERM test a rollout
server; in the SIGINT test, sent to the process group as a terminal's Ctrl-C is, the Prefect
server the run started for want of a PREFECT_API_URL), keeps what it stored at iteration 0's
checkpoint with its lock released, and ends the flow run Cancelled in Prefect; after
SIGTERM, `rldag run --resume` gives the rows of a run never stopped (the stop is one path
whatever asked for it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from flows.cli import main
from tests.support.paths import ROOT
from tests.support.process_tree import ProcessTree
from tests.support.runs import read_run, run_pipeline
from tests.support.stop_points import hold_node

STOP_S = 30  # a stop that waited for the held call (120 s) took longer


def _overrides(tiny_task: Path, tmp_path: Path, storage: Path, servers: bool = False) -> list[str]:
    """3 iterations held in iteration 1; with `servers`, generating on a rollout server."""
    engine = ["nodes.generate.params.engine=server"] if servers else []
    return [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"storage.uri={storage}",
        "iterations=3",
        "checkpoint.every=1",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
        f"nodes.generate.params.weights_dir={tmp_path / 'weights'}",
        *engine,
        *hold_node(tmp_path / "held", "score", "advantage", "scored", at=1),
    ]


def _rldag_run(log: Path, *args: str, env: dict[str, str] | None = None) -> ProcessTree:
    """`rldag run pipeline.yaml ARGS` started in its own session, reporting to the session's
    Prefect server unless `env` says otherwise."""
    cli = [sys.executable, "-m", "flows.cli", "run", str(ROOT / "pipeline.yaml"), *args]
    return ProcessTree(cli, ROOT, env or {**os.environ, "PYTHONPATH": str(ROOT)}, log)


def _held(tree: ProcessTree, marker: Path, timeout: float = 240) -> None:
    """Wait until the run holds in iteration 1, recording its processes."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert tree.poll() is None, f"the run ended before it was held: {tree.tail()}"
        assert time.monotonic() < deadline, "the run never reached the held node"
        time.sleep(0.2)
    time.sleep(0.5)
    tree.scan()  # its processes now, whichever parent they have


def _stop(tree: ProcessTree, marker: Path, stop: Callable[[], None]) -> tuple[int, float]:
    """Hold the run, `stop()` it; its exit code and the seconds the stop took."""
    try:
        _held(tree, marker)
        start = time.monotonic()
        stop()
        code = tree.wait(timeout=120)
        return code, time.monotonic() - start
    finally:
        tree.kill()


def _assert_stopped_at_the_checkpoint(storage: Path, tree: ProcessTree, why: str) -> Path:
    """What a run stopped in iteration 1 stored, and what it said; its directory."""
    (run_dir,) = storage.iterdir()
    assert json.loads((run_dir / "checkpoints" / "latest.json").read_text()) == {"iteration": 0}
    assert [m["iteration"] for m in read_run(run_dir).metrics()] == [0]
    (lock,) = (run_dir / "lock").iterdir()
    assert json.loads(lock.read_text())["released"]
    said = f"stopped by {why} after iteration 0; rldag run --resume {run_dir.name} continues"
    assert said in " ".join(tree.tail().split()), tree.tail()
    assert "Traceback" not in tree.tail()
    return run_dir


def _flow_run(storage: Path):
    """The `rldag` flow run (and its iteration subflows) of the run stored under `storage`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowRunFilter

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name={"any_": ["rldag"]}))
        (flow_run,) = [r for r in runs if f"storage.uri={storage}" in r.parameters["overrides"]]
        children = FlowRunFilter(parent_flow_run_id={"any_": [flow_run.id]})
        subflows = client.read_flow_runs(flow_run_filter=children)
    return flow_run, {r.name: r.state.type.value for r in subflows}


def _assert_cancelled_in_prefect(storage: Path) -> None:
    flow_run, subflows = _flow_run(storage)
    _assert_cancelled(flow_run.state.type.value, subflows)


def _assert_cancelled_in_its_database(home: Path) -> None:
    """The same, read from the database of the Prefect server the run started and stopped."""
    with contextlib.closing(sqlite3.connect(home / "prefect.db")) as db:
        states = dict(db.execute("SELECT name, state_type FROM flow_run").fetchall())
    (top,) = [name for name in states if not name.startswith("iteration-")]
    _assert_cancelled(states.pop(top), states)


def _assert_cancelled(state: str, subflows: dict[str, str]) -> None:
    assert state == "CANCELLED"
    # iteration 2's subflow was opened ahead (flows/rl_loop.py): it ends too, none runs on
    assert subflows == {
        "iteration-0": "COMPLETED",
        "iteration-1": "CANCELLED",
        "iteration-2": "CANCELLED",
    }


def test_sigterm_stops_the_run_and_its_resume_gives_the_rows_of_an_unstopped_run(
    prefect_api, ray_local, tiny_task, tmp_path
):
    storage = tmp_path / "runs"
    overrides = _overrides(tiny_task, tmp_path, storage, servers=True)
    tree = _rldag_run(tmp_path / "run.log", *overrides)
    code, seconds = _stop(tree, tmp_path / "held", lambda: os.kill(tree.proc.pid, signal.SIGTERM))

    assert code == 143, tree.tail()
    assert seconds < STOP_S
    # iteration 0 generated on the rollout server (the run's checkpoint is at iteration 0,
    # below): the server carries the tree's mark, so one that outlived the run is in left()
    assert tree.left() == []
    run_dir = _assert_stopped_at_the_checkpoint(storage, tree, "SIGTERM")
    _assert_cancelled_in_prefect(storage)

    # resumed in this process (on the session's Ray: no second start-up to wait for)
    assert main(["run", str(ROOT / "pipeline.yaml"), *overrides, "--resume", run_dir.name]) == 0
    stopped = read_run(run_dir)
    reference = _overrides(tiny_task, tmp_path, tmp_path / "ref", servers=True)
    never = run_pipeline(ROOT / "pipeline.yaml", *reference)
    assert [m["iteration"] for m in stopped.metrics()] == [0, 1, 2]
    assert stopped.metric("reward/mean") == never.metric("reward/mean")
    for i in range(3):
        assert _samples(stopped.table("generate", i)) == _samples(never.table("generate", i))
        assert stopped.table("train", i)["policy_version"].to_pylist() == [i + 1]


def _samples(table: pa.Table) -> list[tuple]:
    columns = [table[c].to_pylist() for c in ("prompt_id", "sample_idx", "response")]
    return sorted(zip(*columns, strict=True))


def test_sigint_to_the_process_group_stops_the_run_and_the_prefect_server_it_started(
    tiny_task, tmp_path
):
    storage = tmp_path / "runs"
    # no API URL: the run starts (and must stop) a Prefect server of its own
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "home")}
    tree = _rldag_run(tmp_path / "run.log", *_overrides(tiny_task, tmp_path, storage), env=env)
    # as Ctrl-C at a terminal: to the whole foreground process group, not only to rldag
    code, seconds = _stop(tree, tmp_path / "held", lambda: os.killpg(tree.proc.pid, signal.SIGINT))

    assert code == 130, tree.tail()
    assert seconds < STOP_S
    # the Prefect server it started (its group is its own)
    assert tree.started("uvicorn"), tree.commands
    assert tree.left() == []
    _assert_stopped_at_the_checkpoint(storage, tree, "SIGINT")
    _assert_cancelled_in_its_database(tmp_path / "home")


def test_a_cancel_in_prefect_stops_the_run(prefect_api, tiny_task, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    storage = tmp_path / "runs"
    tree = _rldag_run(tmp_path / "run.log", *_overrides(tiny_task, tmp_path, storage))

    def cancel() -> None:  # as the UI's Cancel button does
        flow_run, _ = _flow_run(storage)
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(flow_run.id, Cancelling())

    code, seconds = _stop(tree, tmp_path / "held", cancel)

    assert code == 130, tree.tail()
    assert seconds < STOP_S
    assert tree.left() == []
    _assert_stopped_at_the_checkpoint(storage, tree, "a cancel in Prefect")
    _assert_cancelled_in_prefect(storage)
