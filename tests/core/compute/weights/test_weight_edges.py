"""`weights:` in pipeline.yaml, and how a split weights edge picks its transport: a group
that forms broadcasts; one that cannot falls back to the object store under `auto` and is
an error naming `weights.transport` under `collective`."""

from __future__ import annotations

import logging

import pytest

from rldag.compute.weights.edges import BroadcastEdges
from rldag.compute.worker import PoolWorker
from rldag.config.errors import PlacementError, SpecError
from rldag.config.spec import load_pipeline
from rldag.config.weights import WeightsSpec, WeightsTransport
from tests.support.pipelines import scoring_pipeline


def test_weights_default_to_auto_with_64_mb_buckets(write_yaml, dataset):
    weights = load_pipeline(write_yaml(scoring_pipeline(dataset))).spec.weights
    assert weights.transport is WeightsTransport.auto and weights.bucket_mb == 64


def test_an_unknown_transport_names_its_key(write_yaml, dataset):
    with pytest.raises(SpecError) as info:
        load_pipeline(write_yaml(scoring_pipeline(dataset)), ["weights.transport=pigeon"])
    assert info.value.path == "weights.transport"


def test_an_empty_bucket_names_its_key(write_yaml, dataset):
    with pytest.raises(SpecError) as info:
        load_pipeline(write_yaml(scoring_pipeline(dataset)), ["weights.bucket_mb=0"])
    assert info.value.path == "weights.bucket_mb" and "> 0" in info.value.message


@pytest.fixture
def members(ray_local):
    """A sender and two receivers: pool worker actors, as RayPools makes them."""
    actor = ray_local.remote(PoolWorker)
    workers = [actor.options(num_cpus=0).remote("g", i, 3) for i in range(3)]
    yield workers
    for w in workers:
        ray_local.kill(w)


@pytest.mark.slow
def test_a_group_forms_once_per_edge(members, caplog):
    edges = BroadcastEdges(WeightsSpec())
    with caplog.at_level(logging.INFO, logger="rldag.pools"):
        assert edges.usable("a->b", members[:1], members[1:])
        assert edges.usable("a->b", members[:1], members[1:])
    assert caplog.text.count("gloo broadcast group of 3 formed") == 1


@pytest.mark.slow
def test_auto_falls_back_to_the_object_store_when_no_group_forms(members, caplog):
    edges = BroadcastEdges(WeightsSpec(timeout_s=0.001))  # members cannot connect in time
    with caplog.at_level(logging.WARNING, logger="rldag.pools"):
        assert not edges.usable("a->b", members[:1], members[1:])
    assert "broadcast group did not form" in caplog.text


@pytest.mark.slow
def test_collective_refuses_to_fall_back(members):
    edges = BroadcastEdges(WeightsSpec(transport=WeightsTransport.collective, timeout_s=0.001))
    with pytest.raises(PlacementError) as info:
        edges.usable("a->b", members[:1], members[1:])
    assert info.value.path == "weights.transport" and "auto or object_store" in info.value.message


def test_object_store_forms_no_group():
    edges = BroadcastEdges(WeightsSpec(transport=WeightsTransport.object_store))
    assert not edges.usable("a->b", [], [])  # no worker is called
