"""Kill a run after a checkpoint, resume it, and get exactly the run that was never killed:
policy versions, the data cursor and the stored tables continue without gaps or duplicates,
and the rewards after the resume are identical. The run is asynchronous with k = 2, so it is
killed with iterations in flight (the synchronous resume is the same path with nothing in
flight: tests/e2e/test_worker_faults.py and tests/e2e/test_service_faults.py resume k = 0 runs).
While the first process lives, a second --resume is refused; its SIGKILL frees the run at
once. Ends with the exported HF policy."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.runs import StoredRunView, read_run, run_pipeline


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "flows.cli", "run", str(ROOT / "pipeline.yaml"), *args]


ASYNC = ["async.max_staleness=2", "pools.colocate=[]"]


def _overrides(tiny_task: Path, storage: Path, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        *extra,
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"storage.uri={storage}",
        "iterations=6",
        "checkpoint.every=2",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
    ]


def _wait_for_checkpoint(storage: Path, proc: subprocess.Popen, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for marker in storage.glob("*/checkpoints/latest.json"):
            if json.loads(marker.read_text())["iteration"] >= 1:
                return marker.parents[1].name
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.2)
    raise AssertionError("no checkpoint appeared")


def _responses(run: StoredRunView, i: int) -> list[tuple]:
    table = run.table("generate", i)
    columns = [table[c].to_pylist() for c in ("prompt_id", "sample_idx", "response")]
    return sorted(zip(*columns, strict=True))


@pytest.mark.usefixtures("prefect_api")  # the CLI processes report to the session's server
def test_killed_run_resumes_identically(ray_local, tiny_task, tmp_path):
    k, extra = 2, tuple(ASYNC)
    killed_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        _cli(*_overrides(tiny_task, killed_dir, extra)),
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def resume() -> subprocess.CompletedProcess:
        args = _cli(*_overrides(tiny_task, killed_dir, extra), "--resume", run_id)
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True)

    try:
        run_id = _wait_for_checkpoint(killed_dir, proc)
        os.kill(proc.pid, signal.SIGSTOP)  # while it runs (paused, alive), a --resume is refused
        second = resume()
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"run {run_id} is running: held by pid {proc.pid}" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):  # (an assertion above says why)
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Ray
        proc.wait()
    run_dir = killed_dir / run_id
    assert sorted(p.name for p in (run_dir / "lock").iterdir()) == ["00000001.json"]
    saved = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["iteration"]
    assert saved < 5  # it really stopped early

    resumed = resume()
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # the killed driver's lock did not block the resume; the resume released its own
    assert json.loads((run_dir / "lock" / "00000002.json").read_text())["released"]
    # the run that was never killed, in this process (the same rows by construction)
    reference = run_pipeline(
        ROOT / "pipeline.yaml", *_overrides(tiny_task, tmp_path / "ref", extra)
    )
    killed = read_run(run_dir)
    metrics = killed.metrics()
    assert [m["iteration"] for m in metrics] == list(range(6))  # no gap, no duplicate
    assert [m["reward/mean"] for m in metrics] == reference.metric("reward/mean")
    for i in range(6):
        gen = killed.table("generate", i)
        assert set(gen["policy_version"].to_pylist()) == {max(0, i - k)}
        assert _responses(killed, i) == _responses(reference, i)
        assert sorted(set(gen["prompt_id"].to_pylist())) == list(range(8 * i, 8 * i + 8))
        train = killed.table("train", i)
        assert train["policy_version"].to_pylist() == [i + 1]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    exported = AutoModelForCausalLM.from_pretrained(run_dir / "hf" / "train")
    initial = AutoModelForCausalLM.from_pretrained(tiny_task / "model")
    assert AutoTokenizer.from_pretrained(run_dir / "hf" / "train")("3+4=")["input_ids"]
    changed = [k for k, v in exported.state_dict().items() if not v.equal(initial.state_dict()[k])]
    assert changed  # the trained policy, not the initial one

    # On demand: export the last checkpoint again; it is the policy the run ended with.
    import shutil

    from flows.cli import main

    shutil.rmtree(run_dir / "hf")
    overrides = _overrides(tiny_task, killed_dir, extra)
    assert main(["export", str(ROOT / "pipeline.yaml"), run_id, *overrides]) == 0
    again = AutoModelForCausalLM.from_pretrained(run_dir / "hf" / "train").state_dict()
    assert all(v.equal(again[k]) for k, v in exported.state_dict().items())


def test_resume_without_a_checkpoint_is_bad_input(tiny_task, tmp_path):
    result = subprocess.run(
        _cli(*_overrides(tiny_task, tmp_path), "--resume", "nope"),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--resume" in result.stderr and "nope" in result.stderr
    assert "Traceback" not in result.stderr
