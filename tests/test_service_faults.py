"""Service faults end in a clear failure naming what broke, never a torn or half-visible file,
and a resume that completes the run with the rows of an undisturbed one: storage on a file
system that fills up mid-run (a small tmpfs the test mounts; skipped where this user cannot
mount one); a write to an S3-protocol server that has stopped fails within seconds and leaves
no object."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rldag import checkpoints
from rldag.driver import InlineLauncher, drive
from rldag.errors import RunError
from rldag.events import IterationFinished, add_listener
from rldag.graph import build_graph
from rldag.run import Run
from rldag.spec import load_pipeline
from tests.test_s3_storage import CREDENTIALS

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
NODES = ("prompts", "generate", "score", "advantage", "train")


def _start(tiny_task: Path, root: Path | str, run_id: str | None = None) -> Run:
    overrides = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"storage.uri={root}",
        "ray.enabled=false",
        "iterations=2",
        "checkpoint.every=1",
        "checkpoint.export_hf=false",
        "nodes.prompts.params.batch_size=4",
        "nodes.generate.params.n=2",
    ]
    loaded = load_pipeline(ROOT / "pipeline.yaml", overrides)
    return Run.start(loaded, build_graph(loaded), run_id=run_id)


def _rows(run: Run, i: int, name: str) -> list[dict]:
    table = run.storage.read_table(f"{run.run_id}/iter={i}/{name}.parquet")
    keep = [c for c in table.column_names if not c.endswith(("_per_s", "seconds"))]
    return table.select(keep).to_pylist()


@pytest.fixture(scope="module")
def reference(tiny_task, tmp_path_factory) -> Run:
    """The undisturbed run every faulty one must end equal to."""
    run = _start(tiny_task, tmp_path_factory.mktemp("reference"))
    run.run_inline()
    return run


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


def _resume_and_compare(tiny_task: Path, root: str, run: Run, reference: Run) -> None:
    resumed = _start(tiny_task, root, run.run_id)
    drive(resumed, InlineLauncher(resumed), checkpoints.resume(resumed))
    for i in range(2):
        for name in NODES:
            assert _rows(resumed, i, name) == _rows(reference, i, name), (i, name)
    metrics = resumed.storage.read_table(f"{run.run_id}/metrics.parquet")
    assert metrics["iteration"].to_pylist() == [0, 1]


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
        run.run_inline()
    message = str(err.value)  # names the file, or the node whose checkpoint failed
    assert f"cannot write {run.uri}/" in message or "node 'train' (iteration 1)" in message
    run_dir = Path(run.uri)
    temporary = [p for p in run_dir.rglob("*") if p.name.startswith(".tmp-")]
    assert temporary == []  # nothing half-written is left, nothing torn is visible
    assert pq.read_table(run_dir / "metrics.parquet")["iteration"].to_pylist() == [0]
    for path in run_dir.glob("iter=1/*.parquet"):
        assert pq.read_table(path).num_rows > 0  # whatever is visible is whole
    assert checkpoints.latest(run.storage, run.run_id) == 0
    ballast.unlink()  # space again: the resume completes the run
    _resume_and_compare(tiny_task, str(small_fs / "runs"), run, reference)


def _s3_server(host: str, port: int):
    """moto's threaded S3 server whose stop also closes its socket, so that, as with a stopped
    server process, new connections are refused (moto keeps the buckets in this process)."""
    from moto.server import ThreadedMotoServer

    class StoppableS3(ThreadedMotoServer):
        def stop(self) -> None:
            server = self._server
            super().stop()
            server.server_close()

    server = StoppableS3(ip_address=host, port=port, verbose=False)
    server.start()
    return server


def test_writes_to_a_stopped_s3_server_fail_fast_and_leave_no_object():
    import pyarrow as pa
    from s3fs import S3FileSystem

    from rldag.storage import Storage

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
