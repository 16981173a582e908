"""Against a real `prefect server start`: `rldag deploy --serve` registers a typed deployment,
`prefect deployment run` runs a 2-iteration pipeline through it, and the API shows what the
UI shows — iteration subflows, one task run per node wired as the pipeline's DAG, the
artifacts, the operators' logs — and headless Chromium sees the node names on the graph."""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support import chromium
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline
from tests.support.prefect_server import BIN, PrefectServer

NODES = ["prompts", "answer", "score", "advantage"]


@dataclass
class ServedRun:
    """A finished deployment run and where to look at it."""

    server: PrefectServer
    api: httpx.Client
    deployment: dict
    flow_run: dict
    subflows: dict[str, dict]  # name -> flow run
    run_dir: Path
    watch: subprocess.CompletedProcess


def _write_pipeline(root: Path) -> Path:
    rows = [(a, b) for a in range(2) for b in range(3)]
    data = pa.table(
        {
            "prompt": [f"{a}+{b}=" for a, b in rows],
            "data_source": ["arithmetic"] * len(rows),
            "reward_model": [{"ground_truth": str(a + b)} for a, b in rows],
        }
    )
    pq.write_table(data, root / "train.parquet")
    doc = scoring_pipeline(root / "train.parquet", storage={"uri": f"file://{root}/runs"})
    doc["nodes"]["answer"]["pool"] = "rollout"  # in a Ray actor: its logs cross processes
    (root / "pipeline.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return root / "pipeline.yaml"


def _flow_runs(api: httpx.Client, **flow_runs: object) -> list[dict]:
    return api.post("/flow_runs/filter", json={"flow_runs": flow_runs}).json()


def _task_runs(api: httpx.Client, flow_run_id: str) -> int:
    return len(api.get(f"/flow_runs/{flow_run_id}/graph-v2").json()["nodes"])


def _wait_for_task_runs(api: httpx.Client, subflows: list[dict]) -> None:
    """The server records task runs in batches (flows/settings.py: every 5 s)."""
    deadline = time.monotonic() + 30
    while any(_task_runs(api, subflow["id"]) < len(NODES) for subflow in subflows):
        assert time.monotonic() < deadline, "the task runs never reached the server"
        time.sleep(0.5)


def _wait_for_deployment(api: httpx.Client, serving: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert serving.poll() is None, "rldag deploy --serve exited"
        found = api.get("/deployments/name/rldag/test")
        if found.status_code == 200:
            return found.json()
        time.sleep(0.5)
    raise AssertionError("the deployment never appeared")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> ServedRun:
    root = tmp_path_factory.mktemp("served")
    pipeline = _write_pipeline(root)
    with PrefectServer(root / "prefect-home") as server, httpx.Client(base_url=server.api) as api:
        env = server.env() | {"PYTHONPATH": str(ROOT)}  # the pipeline's user code: tests.*
        deploy = [str(BIN / "rldag"), "deploy", str(pipeline), "iterations=2", "--name", "test"]
        serving = subprocess.Popen(
            [*deploy, "--serve", "--poll", "1"],
            cwd=root,
            env=env,
            stdout=open(root / "serve.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deployment = _wait_for_deployment(api, serving)
            watch = subprocess.run(
                [str(BIN / "prefect"), "deployment", "run", "rldag/test", "--watch"],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            (flow_run,) = _flow_runs(api, deployment_id={"any_": [deployment["id"]]})
            children = _flow_runs(api, parent_flow_run_id={"any_": [flow_run["id"]]})
            (run_dir,) = (root / "runs").iterdir()
            subflows = {r["name"]: r for r in children}
            _wait_for_task_runs(api, children)
            yield ServedRun(server, api, deployment, flow_run, subflows, run_dir, watch)
        finally:
            if serving.poll() is None:  # a runner waits out SIGTERM's grace period: kill it
                os.killpg(serving.pid, signal.SIGKILL)
                serving.wait()


def test_the_deployment_has_typed_parameters_for_the_run_form(served):
    schema = served.deployment["parameter_openapi_schema"]["properties"]
    assert schema["pipeline"]["type"] == "string" and "YAML" in schema["pipeline"]["description"]
    assert schema["overrides"]["anyOf"][0] == {"items": {"type": "string"}, "type": "array"}
    assert schema["iterations"]["anyOf"][0] == {"minimum": 1, "type": "integer"}
    assert served.deployment["parameters"]["overrides"] == ["iterations=2"]
    assert served.deployment["enforce_parameter_schema"] is True
    bad = served.api.post(
        f"/deployments/{served.deployment['id']}/create_flow_run",
        json={"parameters": {"iterations": 0}},
    )
    assert bad.status_code in (409, 422) and "iterations" in bad.text


def test_a_deployment_run_stores_what_rldag_run_stores(served, read_run):
    assert served.watch.returncode == 0, served.watch.stdout + served.watch.stderr
    assert served.flow_run["state_type"] == "COMPLETED"
    for i in range(2):
        names = sorted(p.name for p in (served.run_dir / f"iter={i}").iterdir())
        assert names == sorted(f"{n}.parquet" for n in NODES)
    assert read_run(served.run_dir).metric("iteration") == [0, 1]
    assert (served.run_dir / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_iteration_is_a_subflow_whose_graph_is_the_pipeline_dag(served):
    assert sorted(served.subflows) == ["iteration-0", "iteration-1"]
    for subflow in served.subflows.values():
        graph = served.api.get(f"/flow_runs/{subflow['id']}/graph-v2").json()
        labels = {node_id: node["label"] for node_id, node in graph["nodes"]}
        parents = {
            node["label"]: {labels[p["id"]] for p in node["parents"]} for _, node in graph["nodes"]
        }
        assert parents == {
            "prompts": set(),
            "answer": {"prompts"},
            "score": {"answer"},
            "advantage": {"score"},
        }
        kinds = {node["label"]: node["kind"] for _, node in graph["nodes"]}
        assert set(kinds.values()) == {"task-run"}


def _artifacts(served: ServedRun, flow_run_id: str) -> list[dict]:
    body = {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
    return served.api.post("/artifacts/filter", json=body).json()


def test_the_run_shows_its_progress_and_reward_curve(served):
    found = {a["type"]: a for a in _artifacts(served, served.flow_run["id"])}
    assert set(found) == {"progress", "markdown"}
    assert found["progress"]["data"] == 100.0
    assert "2/2 iterations" in found["progress"]["description"]
    image = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", found["markdown"]["data"])
    assert base64.b64decode(image.group(1)) == (served.run_dir / "reward_curve.png").read_bytes()


def test_each_iteration_shows_its_metrics_and_sample_rollouts(served):
    for i, subflow in enumerate(served.subflows[f"iteration-{n}"] for n in range(2)):
        found = {a["type"]: a for a in _artifacts(served, subflow["id"])}
        assert set(found) == {"table", "markdown"}
        assert "reward/mean" in found["table"]["data"]
        rollouts = found["markdown"]["data"]
        assert f"Sample rollouts, iteration {i}" in rollouts
        assert "reward **1**" in rollouts and "response" in rollouts and "+" in rollouts


def _task_run_ids(served: ServedRun, name: str) -> set[str]:
    body = {"task_runs": {"name": {"any_": [name]}}}
    return {t["id"] for t in served.api.post("/task_runs/filter", json=body).json()}


def test_operator_logs_reach_the_run_logs_from_a_ray_pool_worker(served):
    ids = [s["id"] for s in served.subflows.values()]
    body = {"logs": {"flow_run_id": {"any_": ids}}, "limit": 200}
    logs = served.api.post("/logs/filter", json=body).json()
    ops = [log for log in logs if log["name"] == "rldag.ops"]
    assert sorted(log["message"] for log in ops) == [
        "answered 4 prompts of iteration 0",
        "answered 4 prompts of iteration 1",
    ]
    assert all(log["task_run_id"] for log in ops)  # attached to the node's task run
    assert {log["task_run_id"] for log in ops} <= _task_run_ids(served, "answer")


def test_the_ui_graph_of_an_iteration_shows_the_node_names(served, tmp_path):
    missing = chromium.chromium() is None or shutil.which("tesseract") is None
    if missing and not os.environ.get("CI"):  # CI installs them (make system-deps): fail there
        pytest.skip("chromium or tesseract is not installed: sh scripts/install-system-deps.sh")
    page = f"{served.server.url}/runs/flow-run/{served.subflows['iteration-1']['id']}"
    dom = chromium.dump_dom(page)
    assert "iteration-1" in dom and "<canvas" in dom  # the run page, with its graph canvas
    png = chromium.screenshot(page, tmp_path / "graph.png", size=(1400, 520), scale=2)
    words = chromium.read_text(png, box=(0.2, 0.2, 1.0, 1.0)).split()
    assert [n for n in NODES if n not in words] == []
