"""start_pools reuses a placement planned before (by `rldag run`) only when Ray's cluster has
the same machines as the one it was planned on; otherwise it plans again on Ray's."""

from __future__ import annotations

from rldag.compute import placement
from rldag.compute.cluster import same_machines
from rldag.compute.placement import Cluster, ClusterNode, local_cluster, plan_placement
from rldag.compute.ray_pools import start_pools
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from tests.support.pipelines import scoring_pipeline
from tests.support.ray_free import count_calls, without_ray

RAY = Cluster((ClusterNode("10.0.0.1:abc123", 2.0, 0.0),), "Ray cluster")


def _planned(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["pool"] = "environment"
    loaded = load_pipeline(write_yaml(doc))
    graph = build_graph(loaded)
    return loaded, graph, plan_placement(loaded.spec, graph, local_cluster(2, 0))


def test_clusters_with_the_same_machines_are_the_same_whatever_their_names():
    assert same_machines(local_cluster(2, 0), RAY)
    assert not same_machines(local_cluster(4, 0), RAY)
    assert not same_machines(local_cluster(2, 1), RAY)


def test_a_placement_for_the_same_machines_is_reused(write_yaml, dataset, monkeypatch):
    loaded, graph, planned = _planned(write_yaml, dataset)
    without_ray(monkeypatch, lambda: RAY)
    placements = count_calls(monkeypatch, placement.plan_placement)
    pools = start_pools(loaded.spec, graph, placement=planned)
    assert placements == []
    assert pools.placement.groups is planned.groups and pools.placement.cluster == RAY


def test_on_other_machines_the_pools_are_placed_again(write_yaml, dataset, monkeypatch):
    loaded, graph, planned = _planned(write_yaml, dataset)
    bigger = Cluster((ClusterNode("10.0.0.1:abc123", 8.0, 0.0),), "Ray cluster")
    without_ray(monkeypatch, lambda: bigger)
    placements = count_calls(monkeypatch, placement.plan_placement)
    pools = start_pools(loaded.spec, graph, placement=planned)
    assert len(placements) == 1 and pools.placement.cluster == bigger
