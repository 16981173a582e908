"""An agent node's environments on the environment pool: the pool is reserved for them (no
pool workers), colocation puts them in the shared group, and the episode bound is checked."""

from __future__ import annotations

import pytest

from rldag.compute.placement import Cluster, ClusterNode, plan_placement
from rldag.config.errors import PlacementError
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "agent_python_tool.yaml"
BOX = Cluster((ClusterNode("box", 8, 0),), "test")


def plan(*overrides: str):
    loaded = load_pipeline(EXAMPLE, list(overrides))
    return plan_placement(loaded.spec, build_graph(loaded), BOX, "agent.yaml")


def test_the_environment_pool_is_reserved_for_the_agents_environments():
    placement = plan("pools.environment.workers=2", "pools.environment.cpus_per_worker=2")
    group = placement.groups["environment"]
    assert group.nodes == [] and group.companions == ["generate"]
    assert group.workers == 2 and group.bundle == {"CPU": 2.0}
    assert placement.group_of("generate").name == "training+rollout"


def test_colocated_with_rollout_the_environments_share_its_group():
    placement = plan("pools.colocate=[[training,rollout,environment]]")
    (group,) = placement.groups.values()
    assert "generate" in group.nodes and group.companions == ["generate"]


def test_episodes_of_all_rollout_workers_must_fit_the_pool_bound():
    plan("pools.environment.max_concurrency=32", "nodes.generate.params.max_concurrency=32")
    with pytest.raises(PlacementError) as err:
        plan(
            "pools.colocate=[]",
            "pools.rollout.workers=2",
            "pools.environment.max_concurrency=40",
            "nodes.generate.params.max_concurrency=32",
        )
    assert err.value.path == "nodes.generate.params.max_concurrency"
    assert "2 worker(s) x concurrency 32 = 64 exceeds pools.environment.max_concurrency=40" in str(
        err.value
    )


def test_the_environment_pool_must_fit_the_cluster():
    with pytest.raises(PlacementError, match="pool environment asks for 9 worker"):
        plan("pools.environment.workers=9")
