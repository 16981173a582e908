"""Multi-node placement on Ray's own test cluster: 2 nodes x 4 logical GPUs, training and
rollout split across them, the environment pool on CPUs; workers see the right GPU ids,
ranks and master address."""

from __future__ import annotations

import pytest

from tests.support.pipelines import scoring_pipeline
from tests.support.runs import run_pipeline


@pytest.fixture
def two_nodes():
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "num_gpus": 4})
    cluster.add_node(num_cpus=3, num_gpus=4)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def _probe(pool: str, upstream: str) -> dict:
    return {
        "kind": "transform",
        "op": "tests.support.user_code:WORKER_INFO",
        "pool": pool,
        "inputs": {"rows": upstream},
    }


def test_split_pools_land_on_separate_nodes_with_their_gpus(
    two_nodes, write_yaml, dataset, tmp_path
):
    gpu_pool = {
        "workers": 4,
        "gpus_per_worker": 1,
        "cpus_per_worker": 0.5,
        "strategy": "STRICT_PACK",
    }
    doc = scoring_pipeline(
        dataset,
        storage={"uri": str(tmp_path)},
        ray={"address": two_nodes.address},
        pools={
            "colocate": [],
            "training": gpu_pool,
            "rollout": gpu_pool,
            "environment": {"workers": 2, "cpus_per_worker": 0.5},
        },
    )
    doc["nodes"]["prompts"]["params"]["batch_size"] = 6
    doc["nodes"]["on_rollout"] = _probe("rollout", "prompts")
    doc["nodes"]["on_training"] = _probe("training", "prompts")
    doc["nodes"]["on_environment"] = _probe("environment", "prompts")
    run = run_pipeline(write_yaml(doc), iterations=1)

    def workers(node: str) -> dict[int, dict]:
        rows = run.table(node, 0).to_pylist()
        return {r["rank"]: r for r in rows}

    train, roll, env = workers("on_training"), workers("on_rollout"), workers("on_environment")
    assert sorted(train) == sorted(roll) == [0, 1, 2, 3] and sorted(env) == [0, 1]
    for group in (train, roll):
        assert len({w["ray_node"] for w in group.values()}) == 1  # STRICT_PACK: one node
        gpus = [w["gpu_ids"] for w in group.values()]
        assert all(len(g.split(",")) == 1 for g in gpus) and len(set(gpus)) == 4
        assert {w["world_size"] for w in group.values()} == {4}
        assert {w["master_addr"] for w in group.values()} == {group[0]["ip"]}
    assert next(iter(train.values()))["ray_node"] != next(iter(roll.values()))["ray_node"]
    assert all(w["gpu_ids"] == "" for w in env.values())  # CPU-only pool
