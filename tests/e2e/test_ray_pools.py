"""The pools on a local Ray: stateful operators live in worker actors, tables are dispatched
by prompt group and joined in order, and the weights edge reaches every rollout worker."""

from __future__ import annotations

from rldag.compute.ray_pools import RayPools
from rldag.engine.run import Run
from tests.support.paths import ROOT
from tests.support.runs import StoredRunView, drive_inline, start_run

PROBE = [
    "nodes.probe.kind=transform",
    "nodes.probe.op=tests.support.user_code:WORKER_INFO",
    "nodes.probe.pool=rollout",
    "nodes.probe.inputs.rows=generate",
]


def _run(overrides: list[str], iterations: int) -> tuple[Run, StoredRunView]:
    run = start_run(ROOT / "pipeline.yaml", *overrides)
    return run, drive_inline(run, iterations)


def test_split_pools_two_rollout_workers(ray_local, tiny_task, tmp_path):
    run, stored = _run(
        [
            f"storage.uri={tmp_path}",
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
            "nodes.prompts.params.batch_size=8",
            "nodes.generate.params.n=4",
            "pools.colocate=[]",
            "pools.rollout.workers=2",
            *PROBE,
        ],
        iterations=2,
    )
    assert isinstance(run.runner, RayPools)
    for i in range(2):
        gen = stored.table("generate", i)
        assert set(gen["policy_version"].to_pylist()) == {i}  # both workers got the weights
        probe = stored.table("probe", i)
        assert probe["prompt_id"].to_pylist() == gen["prompt_id"].to_pylist()  # order kept
        ranks = {}
        for pid, rank in zip(
            probe["prompt_id"].to_pylist(), probe["rank"].to_pylist(), strict=True
        ):
            assert ranks.setdefault(pid, rank) == rank  # a prompt group stays on one worker
        assert set(ranks.values()) == {0, 1}
        assert set(probe["world_size"].to_pylist()) == {2}
        assert len(set(probe["pid"].to_pylist())) == 2  # two actor processes
    metrics = stored.metrics()
    assert metrics[0]["timing_s/weight_sync"] == 0.0  # nothing newer to send yet
    assert metrics[1]["timing_s/weight_sync"] > 0.0  # trainer -> 2 rollout workers


def test_colocated_workers_host_both_roles(ray_local, tiny_task, tmp_path):
    _, stored = _run(
        [
            f"storage.uri={tmp_path}",
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
            "nodes.prompts.params.batch_size=4",
            "nodes.generate.params.n=2",
            *PROBE,
            "nodes.train_probe.kind=transform",
            "nodes.train_probe.op=tests.support.user_code:WORKER_INFO",
            "nodes.train_probe.pool=training",
            "nodes.train_probe.inputs.rows=train",
        ],
        iterations=2,
    )
    rollout_pid = set(stored.table("probe", 1)["pid"].to_pylist())
    training_pid = set(stored.table("train_probe", 1)["pid"].to_pylist())
    assert rollout_pid == training_pid and len(rollout_pid) == 1  # one hybrid worker
    gen = stored.table("generate", 1)
    assert set(gen["policy_version"].to_pylist()) == {1}
