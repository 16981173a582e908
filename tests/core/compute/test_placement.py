"""Placement resolution: colocated and split worker groups, several shapes, and errors that
name the pool, what it asked for and what exists."""

from __future__ import annotations

import pytest

from rldag.compute.placement import Cluster, ClusterNode, local_cluster, plan_placement
from rldag.config.errors import PlacementError
from rldag.config.spec import PlacementStrategy, load_pipeline
from rldag.graph.dag import build_graph
from tests.support.pipelines import scoring_pipeline

ONE_BOX = Cluster((ClusterNode("box", 8, 0),), "test")
TWO_GPU_NODES = Cluster((ClusterNode("a", 16, 4), ClusterNode("b", 16, 4)), "test")


def _pipeline(write_yaml, dataset, pools: dict, probe_pools=("rollout", "training")):
    """source -> probe nodes placed on the given pools -> ... (model-free)."""
    doc = scoring_pipeline(dataset, pools=pools)
    upstream = "prompts"
    for pool in probe_pools:
        doc["nodes"][f"on_{pool}"] = {
            "kind": "transform",
            "op": "tests.support.user_code:WORKER_INFO",
            "pool": pool,
            "inputs": {"rows": upstream},
        }
        upstream = f"on_{pool}"
    loaded = load_pipeline(write_yaml(doc))
    return loaded, build_graph(loaded)


def _plan(write_yaml, dataset, pools, cluster=ONE_BOX, probe_pools=("rollout", "training")):
    loaded, graph = _pipeline(write_yaml, dataset, pools, probe_pools)
    return plan_placement(loaded.spec, graph, cluster, "pipeline.yaml")


def test_default_colocates_training_and_rollout(write_yaml, dataset):
    placement = _plan(write_yaml, dataset, {})
    assert list(placement.groups) == ["training+rollout"]
    group = placement.groups["training+rollout"]
    assert group.colocated and group.workers == 1 and group.bundle == {"CPU": 1.0}
    assert group.nodes == ["on_rollout", "on_training"]
    assert placement.group_of("on_training") is placement.group_of("on_rollout")
    assert placement.driver_nodes == ["prompts", "answer", "score", "advantage"]


def test_colocated_bundles_take_the_larger_of_each_resource(write_yaml, dataset):
    pools = {
        "training": {"workers": 2, "cpus_per_worker": 2, "gpus_per_worker": 1},
        "rollout": {"workers": 2, "cpus_per_worker": 4, "gpus_per_worker": 0.5},
    }
    group = _plan(write_yaml, dataset, pools, TWO_GPU_NODES).groups["training+rollout"]
    assert group.bundle == {"CPU": 4.0, "GPU": 1.0} and group.workers == 2


def test_split_pools_get_their_own_groups(write_yaml, dataset):
    pools = {
        "colocate": [],
        "training": {"workers": 4, "gpus_per_worker": 1, "strategy": "STRICT_PACK"},
        "rollout": {"workers": 4, "gpus_per_worker": 1, "strategy": "STRICT_PACK"},
    }
    placement = _plan(write_yaml, dataset, pools, TWO_GPU_NODES)
    assert set(placement.groups) == {"training", "rollout"}
    assert placement.group_of("on_training").name == "training"
    assert not placement.groups["rollout"].colocated
    assert placement.groups["rollout"].strategy is PlacementStrategy.STRICT_PACK


def test_unused_pools_get_no_group(write_yaml, dataset):
    placement = _plan(write_yaml, dataset, {"colocate": []}, probe_pools=("environment",))
    assert list(placement.groups) == ["environment"]


def test_oversubscription_names_the_pool_and_what_exists(write_yaml, dataset):
    pools = {"colocate": [], "training": {"workers": 2, "gpus_per_worker": 1}}
    with pytest.raises(PlacementError) as info:
        _plan(write_yaml, dataset, pools)
    err = info.value
    assert err.path == "pools.training"
    assert "2 worker(s) x 1 CPU, 1 GPU" in err.message and "box: 8 CPU, 0 GPU" in err.message


def test_strict_pack_needs_one_node_with_room_for_all(write_yaml, dataset):
    pools = {
        "colocate": [],
        "rollout": {"workers": 6, "gpus_per_worker": 1, "strategy": "STRICT_PACK"},
    }
    with pytest.raises(PlacementError) as info:
        _plan(write_yaml, dataset, pools, TWO_GPU_NODES, probe_pools=("rollout",))
    assert info.value.path == "pools.rollout" and "STRICT_PACK" in info.value.message
    pools["rollout"]["strategy"] = "PACK"  # 6 GPUs over two 4-GPU nodes fit when spread
    assert _plan(write_yaml, dataset, pools, TWO_GPU_NODES, probe_pools=("rollout",)).groups


def test_strict_spread_needs_a_node_per_worker(write_yaml, dataset):
    pools = {"colocate": [], "rollout": {"workers": 3, "strategy": "STRICT_SPREAD"}}
    with pytest.raises(PlacementError):
        _plan(write_yaml, dataset, pools, TWO_GPU_NODES, probe_pools=("rollout",))
    pools["rollout"]["workers"] = 2
    assert _plan(write_yaml, dataset, pools, TWO_GPU_NODES, probe_pools=("rollout",)).groups


def test_pools_are_checked_jointly(write_yaml, dataset):
    # Each pool alone fits on 8 CPUs; together (6 + 6) they do not.
    pools = {"colocate": [], "training": {"cpus_per_worker": 6}, "rollout": {"cpus_per_worker": 6}}
    with pytest.raises(PlacementError) as info:
        _plan(write_yaml, dataset, pools)
    assert "after the other pools" in info.value.message


def test_bad_colocate_sets(write_yaml, dataset):
    cases = [
        ({"colocate": [["training", "gpu"]]}, "unknown pool 'gpu'"),
        ({"colocate": [["training", "rollout"], ["rollout", "environment"]]}, "two colocate"),
        ({"colocate": [["training"]]}, "at least two"),
        ({"training": {"workers": 2}}, "equal workers (training.workers=2, rollout.workers=1)"),
    ]
    for pools, message in cases:
        with pytest.raises(PlacementError) as info:
            _plan(write_yaml, dataset, pools)
        assert message in info.value.message and info.value.path.startswith("pools.colocate")


def test_operator_worker_limit(write_yaml, dataset):
    doc = scoring_pipeline(dataset, pools={"colocate": [], "rollout": {"workers": 2}})
    doc["nodes"]["solo"] = {
        "kind": "transform",
        "op": "tests.support.user_code:SINGLE_WORKER",
        "pool": "rollout",
        "inputs": {"rows": "prompts"},
    }
    loaded = load_pipeline(write_yaml(doc))
    with pytest.raises(PlacementError) as info:
        plan_placement(loaded.spec, build_graph(loaded), ONE_BOX)
    assert info.value.path == "pools.rollout.workers" and "at most 1" in info.value.message


def test_environment_pool_bounds_sandbox_concurrency(write_yaml, dataset):
    doc = scoring_pipeline(dataset, pools={"environment": {"workers": 2, "max_concurrency": 4}})
    doc["nodes"]["execute"] = {
        "kind": "sandbox",
        "op": "sandbox.python",
        "inputs": {"rollouts": "answer"},
        "params": {"concurrency": 2},
    }
    loaded = load_pipeline(write_yaml(doc))
    group = plan_placement(loaded.spec, build_graph(loaded), ONE_BOX).groups["environment"]
    assert group.nodes == ["execute"] and group.max_concurrency == 4
    doc["nodes"]["execute"]["params"]["concurrency"] = 3
    loaded = load_pipeline(write_yaml(doc))
    with pytest.raises(PlacementError) as info:
        plan_placement(loaded.spec, build_graph(loaded), ONE_BOX)
    assert info.value.path == "nodes.execute.params.concurrency"
    assert "2 worker(s) x concurrency 3 = 6 exceeds" in info.value.message


def test_local_cluster_uses_declared_resources():
    cluster = local_cluster(num_cpus=3, num_gpus=2)
    assert cluster.nodes == (ClusterNode("local", 3.0, 2.0),)
