"""Service faults end in recovery or in a clear failure naming what broke, never a torn or
half-visible file, and a resume that completes the run with the rows of an undisturbed one:
a real Prefect server stopped and started again while `rldag run` uses it; storage on a file
system that fills up mid-run (a small tmpfs the test mounts; skipped where this user cannot
mount one); a write to an S3-protocol server that has stopped fails within seconds and leaves
no object."""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from rldag.config.errors import RunError
from rldag.engine import checkpoints
from rldag.engine.driver import InlineLauncher, drive
from rldag.engine.events import IterationFinished, add_listener
from rldag.engine.run import Run
from rldag.storage.store import Storage
from tests.support.paths import ROOT
from tests.support.prefect_server import PrefectServer
from tests.support.runs import StoredRunView, drive_inline, read_run, small_default, start_run
from tests.support.s3 import CREDENTIALS

NODES = ("prompts", "generate", "score", "advantage", "train")
ITERATIONS = 3


def _overrides(tiny_task: Path, root: Path | str) -> list[str]:
    return [*small_default(tiny_task, root, ITERATIONS), "ray.enabled=false"]


def _start(tiny_task: Path, root: Path | str, run_id: str | None = None) -> Run:
    return start_run(ROOT / "pipeline.yaml", *_overrides(tiny_task, root), run_id=run_id)


def _rows(run: StoredRunView, i: int, name: str) -> list[dict]:
    table = run.table(name, i)
    keep = [c for c in table.column_names if not c.endswith(("_per_s", "seconds"))]
    return table.select(keep).to_pylist()


@pytest.fixture(scope="module")
def reference(tiny_task, tmp_path_factory) -> StoredRunView:
    """The undisturbed run every faulty one must end equal to."""
    return drive_inline(_start(tiny_task, tmp_path_factory.mktemp("reference")))


@contextmanager
def _after_iteration(iteration: int, action: Callable[[], None]) -> Iterator[None]:
    """Do `action` once `iteration` is finished (stored and checkpointed)."""

    def listener(event: object) -> None:
        if isinstance(event, IterationFinished) and event.iteration == iteration:
            action()

    remove = add_listener(listener)
    try:
        yield
    finally:
        remove()


def _resume_and_compare(tiny_task: Path, root: str, run: Run, reference: StoredRunView) -> None:
    resumed = _start(tiny_task, root, run.run_id)
    drive(resumed, InlineLauncher(resumed), checkpoints.resume(resumed))
    _assert_same_rows(StoredRunView(resumed.storage, run.run_id), reference)


def _assert_same_rows(run: StoredRunView, reference: StoredRunView) -> None:
    """The run stored exactly the undisturbed run's rows and metrics, and nothing torn."""
    for i in range(ITERATIONS):
        for name in NODES:
            assert _rows(run, i, name) == _rows(reference, i, name), (i, name)
    metrics = run.metrics_table()
    assert metrics["iteration"].to_pylist() == list(range(ITERATIONS))
    measured = [c for c in metrics.column_names if c.startswith(("reward/", "train/"))]
    keep = [c for c in measured if not c.endswith(("_per_s", "_s", "seconds"))]  # not timings
    expected = reference.metrics_table()
    assert metrics.select(keep).equals(expected.select(keep))
    if run.storage.local:
        temporary = [p for p in run.run_dir.rglob("*") if ".tmp-" in p.name]
        assert temporary == []  # nothing torn or half-written is left


@pytest.fixture
def small_fs(tmp_path):
    """A 64 MB tmpfs mounted for this test."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)])
    if done.returncode != 0:
        pytest.skip("this user cannot mount a tmpfs (needs root or CAP_SYS_ADMIN)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_run_naming_the_file_and_resume_completes_it(
    tiny_task, small_fs, reference
):
    ballast = small_fs / "ballast"

    def fill() -> None:
        with open(ballast, "wb") as f:  # take every free byte
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 2**20)

    run = _start(tiny_task, small_fs / "runs")
    with (
        _after_iteration(0, fill),
        pytest.raises(RunError, match=r"No space left on device") as err,
    ):
        drive_inline(run)
    message = str(err.value)  # names the file, or the node whose checkpoint failed
    assert f"cannot write {run.uri}/" in message or "node 'train' (iteration 1)" in message
    run_dir = Path(run.uri)
    temporary = [p for p in run_dir.rglob("*") if p.name.startswith(".tmp-")]
    assert temporary == []  # nothing half-written is left, nothing torn is visible
    assert read_run(run_dir).metric("iteration") == [0]
    for path in run_dir.glob("iter=1/*.parquet"):
        assert pq.read_table(path).num_rows > 0  # whatever is visible is whole
    assert checkpoints.latest(run.storage, run.run_id) == 0
    ballast.unlink()  # space again: the resume completes the run
    _resume_and_compare(tiny_task, str(small_fs / "runs"), run, reference)


def _s3_server(host: str, port: int):
    """moto's threaded S3 server whose stop, as a stopped server process's, closes its socket
    and every connection it accepted, so new connections are refused and open ones reset
    (moto keeps the buckets in this process: a server started again has them)."""
    from moto.server import ThreadedMotoServer

    class StoppableS3(ThreadedMotoServer):
        def start(self) -> None:
            super().start()
            self.connections: list[socket.socket] = []
            accept = self._server.process_request

            def process_request(request: socket.socket, address: object) -> None:
                self.connections.append(request)
                accept(request, address)

            self._server.process_request = process_request

        def stop(self) -> None:
            # shut the sockets down (not just closed: a forked child may hold them too)
            for sock in (self._server.socket, *self.connections):
                with contextlib.suppress(OSError):  # one closed already
                    sock.shutdown(socket.SHUT_RDWR)
            super().stop()  # werkzeug closes the listening socket as it stops serving

    server = StoppableS3(ip_address=host, port=port, verbose=False)
    server.start()
    return server


def test_writes_to_a_stopped_s3_server_fail_fast_and_leave_no_object():
    import pyarrow as pa
    from s3fs import S3FileSystem

    from rldag.storage.store import Storage

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = _s3_server("127.0.0.1", 0)
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in CREDENTIALS.items():
            patch.setenv(key, value)
        S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir("faults")
        table = pa.table({"x": list(range(1000))})
        store = Storage("s3://faults/runs", endpoint_url=endpoint, skip_instance_cache=True)
        store.write_table("run/iter=0/a.parquet", table)
        server.stop()
        start = time.monotonic()
        with pytest.raises(Exception, match="Could not connect to the endpoint"):
            store.write_table("run/iter=1/a.parquet", table)
        assert time.monotonic() - start < 30  # not botocore's minutes of retries
        server = _s3_server(host, port)  # back, with the same bucket
        try:
            assert store.list("run") == ["iter=0"]  # the failed PUT left nothing
            assert store.read_table("run/iter=0/a.parquet").equals(table)
            store.write_table("run/iter=1/a.parquet", table)  # and writes work again
            assert store.table_rows("run/iter=1/a.parquet") == 1000
        finally:
            server.stop()


def _cli_run(tiny_task: Path, root: Path, env: dict, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "flows.cli", "run", str(ROOT / "pipeline.yaml")]
    return subprocess.Popen(
        [*command, *_overrides(tiny_task, root), *extra],
        cwd=ROOT,
        env=env | {"PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_iteration(root: Path, proc: subprocess.Popen, done: int) -> str:
    """Wait until the run under `root` has stored `done` iterations; its run id."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for path in root.glob("*/metrics.parquet"):
            if pq.read_metadata(path).num_rows >= done:
                return path.parent.name
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"iteration {done - 1} never finished")


def test_a_restarted_prefect_server_does_not_lose_the_run(tiny_task, tmp_path, reference):
    """`rldag run` against a real `prefect server start`, stopped after iteration 0 and
    started again on the same port and database: the run waits for it and goes on (or, had
    the outage hit a task run, stops naming the server and resumes), storing exactly the
    undisturbed run's rows; the server knows the run and all its iteration subflows."""
    home, root = tmp_path / "prefect", tmp_path / "runs"
    server = PrefectServer(home).__enter__()
    try:
        proc = _cli_run(tiny_task, root, server.env())
        run_id = _wait_for_iteration(root, proc, 1)
        server.__exit__()  # SIGTERM to the server's process group, as an operator would
        time.sleep(0.5)
        server = PrefectServer(home, port=server.port).__enter__()
        out, err = proc.communicate(timeout=300)
        if proc.returncode == 1:  # the resumable failure: it names the server
            assert f"the Prefect server at {server.api} is unreachable" in err, err
            assert "Traceback" not in err and f"--resume {run_id}" in err
            proc = _cli_run(tiny_task, root, server.env(), "--resume", run_id)
            out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        _assert_same_rows(read_run(root, run_id), reference)
        with httpx.Client(base_url=server.api) as api:
            runs = api.post("/flow_runs/filter", json={}).json()
        subflows = sorted(r["name"] for r in runs if r["parent_task_run_id"])
        assert [f"iteration-{i}" for i in range(ITERATIONS)] == sorted(set(subflows))
        assert "COMPLETED" in {r["state_type"] for r in runs if not r["parent_task_run_id"]}
    finally:
        server.__exit__()


def test_an_s3_server_stopped_mid_run_stops_it_naming_storage_and_resume_completes_it(
    prefect_api, tiny_task, reference, capsys, monkeypatch
):
    """A whole `rldag run` stored on a real S3-protocol server that stops after iteration 0:
    exit 1 naming the object it could not reach, no traceback, no half-visible object; once
    the server is back, `--resume` completes the run with the undisturbed run's rows."""
    from s3fs import S3FileSystem

    from flows.cli import main

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    server = _s3_server("127.0.0.1", 0)
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir("faults-run")
        root = "s3://faults-run/runs"
        args = ["run", str(ROOT / "pipeline.yaml"), *_overrides(tiny_task, root)]
        args.append(f"storage.endpoint_url={endpoint}")
        capsys.readouterr()
        with _after_iteration(0, server.stop):
            assert main(args) == 1
        err = capsys.readouterr().err
        server = _s3_server(host, port)  # back, with the same bucket
        store = Storage(root, endpoint_url=endpoint, skip_instance_cache=True)
        (run_id,) = store.list("")
        assert f"cannot write {root}/{run_id}/" in err, err  # names the object, on S3
        assert "Traceback" not in err
        stored = StoredRunView(store, run_id)
        assert stored.metric("iteration") == [0]
        assert checkpoints.latest(store, run_id) == 0
        for name in store.list(f"{run_id}/iter=1"):  # whatever is visible is whole
            assert store.read_table(f"{run_id}/iter=1/{name}").num_rows > 0
        assert main([*args, "--resume", run_id]) == 0
        _assert_same_rows(stored, reference)
    finally:
        server.stop()
