"""`storage.uri: s3://bucket/prefix` through s3fs, against a real local S3-protocol server
(moto's server mode, on loopback): the same round trips, listings and atomic visibility as
local storage; endpoint and credentials from pipeline keys or the AWS variables; an
unreachable bucket is bad input; a whole run stored on S3 has the local run's layout."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from s3fs import S3FileSystem

from rldag.config.errors import InputError
from rldag.config.spec import StorageSpec
from rldag.storage.store import Storage, open_storage
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline


@pytest.fixture
def bucket(endpoint, request) -> str:
    """A new empty bucket for this test."""
    name = "rldag-" + request.node.name.replace("_", "-")[:40].strip("-").lower()
    S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir(name)
    return name


def test_tables_text_and_bytes_round_trip_on_s3(endpoint, bucket):
    store = open_storage(StorageSpec(uri=f"s3://{bucket}/prefix", endpoint_url=endpoint))
    table = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "b": ["x", "y", "z"]})
    handle = store.write_table("run/iter=0/node.parquet", table)
    assert handle.uri == f"s3://{bucket}/prefix/run/iter=0/node.parquet"
    assert handle.rows == 3 and handle.bytes == store.fs.size(handle.uri)
    assert store.read_table("run/iter=0/node.parquet").equals(table)
    assert store.table_rows("run/iter=0/node.parquet") == 3
    assert store.write_text("run/pipeline.yaml", "name: x\n").endswith("run/pipeline.yaml")
    assert store.read_text("run/pipeline.yaml") == "name: x\n"
    store.write_bytes("run/reward_curve.png", b"\x89PNG")
    assert store.read_bytes("run/reward_curve.png") == b"\x89PNG"
    assert store.list("run") == ["iter=0", "pipeline.yaml", "reward_curve.png"]
    assert store.list("nothing") == [] and not store.exists("nothing")


def test_endpoint_and_credentials_come_from_the_aws_variables(endpoint, bucket, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    store = Storage(f"s3://{bucket}/p", skip_instance_cache=True)
    store.write_text("hello.txt", "hi")
    reader = S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    assert reader.cat(f"{bucket}/p/hello.txt") == b"hi"


def test_readers_never_see_a_torn_table_on_s3(endpoint, bucket):
    """A reader polling while a large object is rewritten sees the old or the new, whole."""
    store = Storage(f"s3://{bucket}", endpoint_url=endpoint)
    small = pa.table({"v": pa.array(range(10), pa.int64())})
    big = pa.table({"v": pc.random(1_000_000)})  # ~8 MB of incompressible doubles
    store.write_table("t.parquet", small)
    seen, errors, stop = set(), [], threading.Event()

    def read_loop():
        reader = Storage(f"s3://{bucket}", endpoint_url=endpoint, skip_instance_cache=True)
        while not stop.is_set():
            try:
                seen.add(reader.read_table("t.parquet").num_rows)
                seen.add(reader.table_rows("t.parquet"))
            except Exception as err:  # a torn or expired read
                errors.append(err)

    thread = threading.Thread(target=read_loop)
    thread.start()
    for _ in range(3):
        store.write_table("t.parquet", big)
        store.write_table("t.parquet", small)
    stop.set()
    thread.join()
    assert errors == [] and seen <= {10, 1_000_000} and 10 in seen
    assert store.list("") == ["t.parquet"]  # no temporary objects


def test_a_failed_upload_leaves_the_old_object(endpoint, bucket, monkeypatch):
    store = Storage(f"s3://{bucket}", endpoint_url=endpoint, skip_instance_cache=True)
    store.write_text("x.txt", "old")

    async def broken(method, *args, **kwargs):
        raise OSError(f"connection reset during {method}")

    monkeypatch.setattr(store.fs, "_call_s3", broken)
    with pytest.raises(OSError):
        store.write_text("x.txt", "new")
    monkeypatch.undo()
    assert store.read_text("x.txt") == "old" and store.list("") == ["x.txt"]


def test_a_missing_bucket_is_bad_input_before_anything_runs(endpoint):
    with pytest.raises(InputError) as err:
        Storage("s3://no-such-bucket/runs", endpoint_url=endpoint).check()
    assert err.value.path == "storage.uri" and "no-such-bucket" in str(err.value)


def test_an_endpoint_for_local_storage_is_bad_input(tmp_path):
    with pytest.raises(InputError) as err:
        open_storage(StorageSpec(uri=str(tmp_path), endpoint_url="http://127.0.0.1:1"))
    assert err.value.path == "storage.endpoint_url"


def test_rldag_run_with_a_missing_bucket_exits_2_and_writes_nothing(endpoint, write_yaml, dataset):
    path = write_yaml(scoring_pipeline(dataset))
    overrides = ["storage.uri=s3://no-such-bucket/runs", f"storage.endpoint_url={endpoint}"]
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", str(path), *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr
    assert "storage.uri" in result.stderr and "Traceback" not in result.stderr
    buckets = S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).ls("")
    assert "no-such-bucket" not in buckets


@pytest.mark.slow
def test_a_run_stored_on_s3_has_the_local_layout_and_tables(
    prefect_api, endpoint, bucket, write_yaml, dataset, tmp_path, capsys
):
    from flows.cli import main
    from flows.rl_loop import rldag_run

    path = write_yaml(scoring_pipeline(dataset))
    on_s3 = [f"storage.uri=s3://{bucket}/runs", f"storage.endpoint_url={endpoint}"]
    s3_id = rldag_run(str(path), on_s3)
    local_id = rldag_run(str(path), [f"storage.uri={tmp_path}/runs"])
    s3 = Storage(f"s3://{bucket}/runs/{s3_id}", endpoint_url=endpoint, skip_instance_cache=True)
    local = Storage(f"{tmp_path}/runs/{local_id}")
    assert (
        s3.list("")
        == local.list("")
        == [
            "iter=0",
            "iter=1",
            "lock",  # the run's lease (rldag/storage/run_lock.py), released at the end
            "metrics.parquet",
            "pipeline.yaml",
            "reward_curve.png",
        ]
    )
    for i in range(2):
        names = s3.list(f"iter={i}")
        assert names == local.list(f"iter={i}") and len(names) == 4
        for name in names:
            assert s3.read_table(f"iter={i}/{name}").equals(local.read_table(f"iter={i}/{name}"))
    assert s3.read_text("pipeline.yaml") == local.read_text("pipeline.yaml").replace(
        f"uri: {tmp_path}/runs\n  persist: true\n  endpoint_url: null",
        f"uri: s3://{bucket}/runs\n  persist: true\n  endpoint_url: {endpoint}",
    )
    capsys.readouterr()
    target = f"s3://{bucket}/runs/{s3_id}"
    assert main(["inspect", target, "--endpoint-url", endpoint, "--node", "score"]) == 0
    assert "score, iteration 1: 4 of 4 rows" in capsys.readouterr().out


def test_a_directory_written_locally_lands_on_s3_and_comes_back(endpoint, bucket):
    store = Storage(f"s3://{bucket}/runs", endpoint_url=endpoint, skip_instance_cache=True)
    with store.local_dir("run/checkpoints/iter=1/train") as path:
        (Path(path) / "shard").mkdir()
        (Path(path) / "shard" / "0.distcp").write_bytes(b"weights")
        (Path(path) / "extra.json").write_text("{}")
    assert store.list("run/checkpoints/iter=1/train") == ["extra.json", "shard"]
    with store.fetch_dir("run/checkpoints/iter=1/train") as path:
        assert (Path(path) / "shard" / "0.distcp").read_bytes() == b"weights"
        assert (Path(path) / "extra.json").read_text() == "{}"
    assert not Path(path).exists()  # the download was temporary


def test_a_failed_directory_write_uploads_nothing(endpoint, bucket):
    store = Storage(f"s3://{bucket}/runs", endpoint_url=endpoint, skip_instance_cache=True)
    with pytest.raises(RuntimeError), store.local_dir("run/hf/train") as path:
        (Path(path) / "config.json").write_text("{}")
        raise RuntimeError("the trainer crashed mid-save")
    assert not store.exists("run/hf/train")


@pytest.mark.slow
def test_checkpoints_and_the_exported_policy_live_on_s3_and_resume(
    prefect_api, endpoint, bucket, tiny_task, read_run
):
    from flows.rl_loop import rldag_run

    overrides = [
        f"storage.uri=s3://{bucket}/runs",
        f"storage.endpoint_url={endpoint}",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=4",
        "nodes.generate.params.n=2",
        "ray.enabled=false",
        "checkpoint.every=1",
    ]
    pipeline = str(ROOT / "pipeline.yaml")
    run_id = rldag_run(pipeline, [*overrides, "iterations=2"])
    store = Storage(f"s3://{bucket}/runs/{run_id}", endpoint_url=endpoint)
    assert store.list("checkpoints") == ["iter=0", "iter=1", "latest.json"]
    assert store.list("checkpoints/iter=1/train") != []
    assert "config.json" in store.list("hf/train")
    assert rldag_run(pipeline, [*overrides, "iterations=3"], resume=run_id) == run_id
    metrics = read_run(f"s3://{bucket}/runs/{run_id}", endpoint_url=endpoint).metrics()
    assert [m["policy_version"] for m in metrics] == [0, 1, 2]
