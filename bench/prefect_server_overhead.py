"""What a Prefect server costs rldag, measured in one run on this machine:

1. start latency: from `prefect deployment run rldag/NAME` to the first iteration subflow
   starting, for `rldag deploy --serve` (polls every 2 s) and for a process work pool's
   `prefect worker start` (Prefect's default poll, 10 s);
2. per-iteration wall time of a near-zero-compute pipeline (4 nodes) against
   `prefect server start` vs the embedded ephemeral default, and so the overhead per
   iteration that the server adds.

    .venv/bin/python bench/prefect_server_overhead.py [--iterations 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.prefect_server import BIN, PrefectServer  # noqa: E402


def write_pipeline(root: Path, iterations: int) -> Path:
    """A model-free pipeline: source -> answer -> score -> advantage (user code:
    tests/support/user_code.py)."""
    data = pa.table({"prompt": [f"{i}+1=" for i in range(64)], "data_source": ["x"] * 64})
    data = data.append_column("reward_model", pa.array([{"ground_truth": "1"}] * 64))
    pq.write_table(data, root / "train.parquet")
    nodes = {
        "prompts": {"kind": "source", "op": "dataset", "params": {"path": str(root / "train.parquet"), "batch_size": 8}},  # noqa: E501
        "answer": {"kind": "transform", "op": "tests.support.user_code:ANSWER_HALF", "inputs": {"prompts": "prompts"}},  # noqa: E501
        "score": {"kind": "score", "op": "tests.support.user_code:echo_score", "inputs": {"rollouts": "answer"}},  # noqa: E501
        "advantage": {"kind": "transform", "op": "grpo_advantage", "inputs": {"scored": "score"}},
    }  # fmt: skip
    doc = {"name": "bench", "iterations": iterations, "model": {"path": "unused"}}
    doc |= {"storage": {"uri": f"file://{root}/runs"}, "nodes": nodes}
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def child(pipeline: str) -> None:
    """In a fresh process: run the pipeline, print iteration end times and compute as JSON."""
    from flows.rl_loop import rldag_run
    from rldag.engine.events import IterationFinished, RunStarted, add_listener

    marks, compute, started = [], [], []

    def listen(event: object) -> None:
        if isinstance(event, RunStarted):
            started.append(time.time())
            marks.append(time.perf_counter())
        elif isinstance(event, IterationFinished):
            marks.append(time.perf_counter())
            nodes = [k for k in event.metrics if k.startswith("timing_s/")]
            nodes = [k for k in nodes if k not in ("timing_s/iteration", "timing_s/weight_sync")]
            compute.append(sum(event.metrics[key] for key in nodes))

    add_listener(listen)
    rldag_run(pipeline)
    walls = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    print(json.dumps({"walls": walls, "compute": compute, "started": started[0]}))


def per_iteration(env: dict[str, str], pipeline: Path) -> tuple[float, float, float]:
    """Median wall and operator seconds per iteration (skipping the first), and seconds from
    the process start to the run starting (imports, Prefect client or ephemeral server)."""
    t0 = time.time()
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(pipeline)],
        env=env | {"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    wall, compute = (statistics.median(result[k][1:]) for k in ("walls", "compute"))
    return wall, compute, result["started"] - t0


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        env=env | {"PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)  # workers ignore SIGTERM
        process.wait()


def _utc(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def start_latency(
    api: httpx.Client, env: dict[str, str], name: str, repeats: int
) -> list[tuple[float, float]]:
    """Seconds from `prefect deployment run` to the flow run, then iteration-0, starting."""
    deadline = time.monotonic() + 120
    while api.get(f"/deployments/name/rldag/{name}").status_code != 200:
        assert time.monotonic() < deadline, f"deployment {name} never appeared"
        time.sleep(0.5)
    out = []
    for _ in range(repeats):
        t0 = time.time()
        run = [str(BIN / "prefect"), "deployment", "run", f"rldag/{name}", "--watch"]
        subprocess.run(run, env=env, capture_output=True, check=True, timeout=600)
        runs = api.post("/flow_runs/filter", json={"sort": "START_TIME_DESC"}).json()
        first = [r for r in runs if r["name"] == "iteration-0" and r["start_time"]][0]
        parent = [r for r in runs if r["deployment_id"] and r["start_time"]][0]
        out.append((_utc(parent["start_time"]) - t0, _utc(first["start_time"]) - t0))
        time.sleep(3)  # let the server finish processing the run's events
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    print(describe())
    print(load_line("start"), flush=True)
    with tempfile.TemporaryDirectory(prefix="rldag-bench-") as tmp:
        root = Path(tmp)
        pipeline = write_pipeline(root, args.iterations)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        ephemeral = clean | {"PREFECT_HOME": str(root / "ephemeral-home")}
        eph_wall, eph_compute, eph_start = per_iteration(ephemeral, pipeline)
        with PrefectServer(root / "home") as server, httpx.Client(base_url=server.api) as api:
            env = server.env()
            srv_wall, srv_compute, srv_start = per_iteration(env, pipeline)
            (root / "deploy").mkdir()
            small = write_pipeline(root / "deploy", iterations=2)
            rldag = [str(BIN / "rldag"), "deploy", str(small), "--name"]
            served = _start([*rldag, "serve", "--serve", "--poll", "2"], env, root / "serve.log")
            try:
                serve_s = start_latency(api, env, "serve", args.repeats)
            finally:
                _stop(served)
            pool = [*rldag, "pool", "--pool", "bench"]
            subprocess.run(pool, env=env | {"PYTHONPATH": str(ROOT)}, check=True, cwd=ROOT)
            worker = [str(BIN / "prefect"), "worker", "start", "--pool", "bench"]
            working = _start(worker, env, root / "worker.log")
            try:
                pool_s = start_latency(api, env, "pool", args.repeats)
            finally:
                _stop(working)
    print(load_line("end"))
    print(f"per iteration, {args.iterations} iterations of a 4-node pipeline (median of 1..):")
    print(f"  ephemeral API    {eph_wall * 1e3:7.0f} ms  (operators {eph_compute * 1e3:.0f} ms)")
    print(f"  prefect server   {srv_wall * 1e3:7.0f} ms  (operators {srv_compute * 1e3:.0f} ms)")
    print(f"  server - ephemeral: {(srv_wall - eph_wall) * 1e3:+.0f} ms per iteration")
    print("process start -> run started (imports + API):")
    print(f"  ephemeral API {eph_start:5.1f} s   prefect server {srv_start:5.1f} s")
    print("`prefect deployment run` -> flow run started / iteration-0 started, per repeat:")
    for label, marks in (("serve (2 s poll)", serve_s), ("worker (10 s poll)", pool_s)):
        print(f"  {label:<19}" + "  ".join(f"{a:5.1f} / {b:5.1f} s" for a, b in marks))


if __name__ == "__main__":
    main()
