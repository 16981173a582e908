"""End to end under a real Prefect server: stored tables, metrics, the flow-run graph per
iteration, artifacts, and the weights edge advancing the policy version."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from flows.rl_loop import rldag_run
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline
from tests.support.small_pipelines import small_grpo


def _subflows(client, run_id: str) -> dict[str, object]:
    runs = client.read_flow_runs(limit=200)
    return {r.name: r for r in runs if (r.parameters or {}).get("run_id") == run_id}


def _graph(client, flow_run_id, nodes: int) -> dict[str, set[str]]:
    """Task-run label -> labels of its parents, from the UI's graph endpoint. The server
    records task runs in batches (flows/settings.py), so wait until all `nodes` are there."""
    deadline = time.monotonic() + 30
    while True:
        graph = client.request("GET", f"/flow_runs/{flow_run_id}/graph-v2").json()
        if len(graph["nodes"]) >= nodes or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    labels = {node_id: node["label"] for node_id, node in graph["nodes"]}
    return {
        node["label"]: {labels[p["id"]] for p in node["parents"] if p["id"] in labels}
        for _, node in graph["nodes"]
    }


def test_model_free_pipeline_under_prefect(prefect_api, write_yaml, dataset, tmp_path, read_run):
    doc = scoring_pipeline(dataset, storage={"uri": f"file://{tmp_path}/runs"})
    run_id = rldag_run(str(write_yaml(doc)), ["iterations=2"])
    run_dir = tmp_path / "runs" / run_id
    assert (run_dir / "pipeline.yaml").read_text().startswith("name: scoring")
    for i in range(2):
        names = sorted(p.name for p in (run_dir / f"iter={i}").iterdir())
        assert names == ["advantage.parquet", "answer.parquet", "prompts.parquet", "score.parquet"]
        scored = pq.read_table(run_dir / f"iter={i}" / "advantage.parquet")
        assert scored.num_rows == 4
        ids = scored["prompt_id"].to_pylist()
        assert ids == list(range(4 * i, 4 * i + 4))  # unique across iterations
        # ANSWER_HALF answers even prompt ids right: echo_score gives exactly those 1.0.
        assert scored["reward"].to_pylist() == [float(p % 2 == 0) for p in ids]
        assert all('"score"' in info for info in scored["reward_info"].to_pylist())
    metrics = read_run(run_dir).metrics()
    assert [m["iteration"] for m in metrics] == [0, 1]
    assert all(m["reward/mean"] == 0.5 for m in metrics)

    with get_client(sync_client=True) as client:
        subflows = _subflows(client, run_id)
        assert set(subflows) == {"iteration-0", "iteration-1"}
        graph = _graph(client, subflows["iteration-1"].id, nodes=4)
        assert graph == {
            "prompts": set(),
            "answer": {"prompts"},
            "score": {"answer"},
            "advantage": {"score"},
        }
        artifacts = client.read_artifacts()
        mine = [a for a in artifacts if a.flow_run_id == subflows["iteration-0"].id]
        tables = [a for a in mine if a.type == "table"]
        assert len(tables) == 1 and "reward/mean" in str(tables[0].data)


def test_grpo_pipeline_two_iterations_advances_the_policy(
    prefect_api, ray_local, tiny_task, tmp_path, read_run
):
    root = ROOT
    run_id = rldag_run(str(root / "pipeline.yaml"), small_grpo(tiny_task, tmp_path, 2))
    run_dir = tmp_path / "runs" / run_id
    for i in range(2):
        gen = pq.read_table(run_dir / f"iter={i}" / "generate.parquet")
        assert gen.num_rows == 8 * 4
        for column in (
            "prompt_id",
            "sample_idx",
            "response",
            "response_ids",
            "prompt_ids",
            "response_logprobs",
            "finish_reason",
            "policy_version",
        ):
            assert column in gen.column_names
        assert set(gen["policy_version"].to_pylist()) == {i}
        assert gen["sample_idx"].to_pylist()[:4] == [0, 1, 2, 3]
        lengths = [len(r) for r in gen["response_ids"].to_pylist()]
        assert lengths == [len(lp) for lp in gen["response_logprobs"].to_pylist()]
        adv = pq.read_table(run_dir / f"iter={i}" / "advantage.parquet")
        assert {"reward", "advantage"} <= set(adv.column_names)
        train = pq.read_table(run_dir / f"iter={i}" / "train.parquet")
        assert train["policy_version"].to_pylist() == [i + 1]
    metrics = read_run(run_dir).metrics()
    assert [m["policy_version"] for m in metrics] == [0, 1]
    for key in (
        "reward/mean",
        "reward/std",
        "response_length/mean",
        "perf/tokens_per_s",
        "timing_s/generate",
        "timing_s/train",
        "train/loss",
        "train/grad_norm",
    ):
        assert all(m[key] == m[key] for m in metrics), key  # present, not NaN
    with get_client(sync_client=True) as client:
        graph = _graph(client, _subflows(client, run_id)["iteration-1"].id, nodes=5)
        assert graph["train"] == {"advantage"} and graph["generate"] == {"prompts"}


@pytest.mark.parametrize("mode", ["iteration", "continuous"])
def test_async_iterations_overlap_in_prefect_each_with_its_dag(
    prefect_api, ray_local, tiny_task, tmp_path, mode
):
    root = ROOT
    overrides = [
        *small_grpo(tiny_task, tmp_path, 3),
        "nodes.train.params.epochs=4",  # a train step long enough to overlap visibly
        f"async.mode={mode}",
    ]
    run_id = rldag_run(str(root / "examples" / "async.yaml"), overrides)
    run_dir = tmp_path / "runs" / run_id
    for i in range(3):
        gen = pq.read_table(run_dir / f"iter={i}" / "generate.parquet")
        versions = set(gen["policy_version"].to_pylist())
        if mode == "iteration":
            assert versions == {max(0, i - 1)}
        else:  # the newest version when its step started: at least i - 1
            assert min(versions) >= max(0, i - 1)
    with get_client(sync_client=True) as client:
        subflows = _subflows(client, run_id)
        assert set(subflows) == {"iteration-0", "iteration-1", "iteration-2"}
        for name in ("iteration-1", "iteration-2"):
            graph = _graph(client, subflows[name].id, nodes=5)
            assert graph["train"] == {"advantage"} and graph["score"] == {"generate"}
        tasks = {}
        for name, subflow in subflows.items():
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[subflow.id]))
            )
            tasks |= {(name, r.name): r for r in runs}
        # generate of iteration 1 ran while train of iteration 0 was still training.
        train_0, generate_1 = tasks[("iteration-0", "train")], tasks[("iteration-1", "generate")]
        assert generate_1.start_time < train_0.end_time
        if mode == "continuous":  # and generate of iteration 1 began before that of 0 ended
            assert generate_1.start_time < tasks[("iteration-0", "generate")].end_time
