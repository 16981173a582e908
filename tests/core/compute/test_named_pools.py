"""Pools by name: `pools.<name>` declares a pool like the standard three; nodes, colocation,
fit checks and `rldag plan` treat every pool alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.cli import main
from rldag.compute.placement import Cluster, ClusterNode, plan_placement
from rldag.config.errors import PlacementError, SpecError
from rldag.config.spec import PoolSpec, load_pipeline
from rldag.graph.dag import build_graph
from tests.support.pipelines import scoring_pipeline
from tests.support.runs import drive_inline, start_run

ONE_BOX = Cluster((ClusterNode("box", 8, 0),), "test")


def _reward_pipeline(dataset: Path, pools: dict, **extra: object) -> dict:
    """The model-free scoring pipeline plus a probe node on the `reward` pool."""
    doc = scoring_pipeline(dataset, pools=pools, **extra)
    doc["nodes"]["judge"] = {
        "kind": "transform",
        "op": "tests.support.user_code:WORKER_INFO",
        "pool": "reward",
        "inputs": {"rows": "score"},
    }
    return doc


def test_a_declared_pool_has_the_defaults_and_the_standard_ones_stay(write_yaml, dataset):
    path = write_yaml(_reward_pipeline(dataset, {"reward": {"workers": 2, "gpus_per_worker": 1}}))
    spec = load_pipeline(path, ["pools.training.workers=3"]).spec
    assert list(spec.pools.named) == ["training", "rollout", "environment", "reward"]
    assert spec.pools.named["reward"] == PoolSpec(workers=2, gpus_per_worker=1.0)
    assert spec.pools.named["training"].workers == 3
    assert spec.pools.named["rollout"] == PoolSpec()
    assert spec.nodes["judge"].resolved_pool == "reward"


def test_the_resolved_yaml_writes_pools_by_name_and_loads_back(write_yaml, dataset):
    loaded = load_pipeline(write_yaml(_reward_pipeline(dataset, {"reward": {"workers": 2}})))
    doc = yaml.safe_load(loaded.resolved_yaml)
    assert doc["pools"]["reward"]["workers"] == 2 and "named" not in doc["pools"]
    again = load_pipeline(write_yaml(loaded.resolved_yaml, "resolved.yaml")).spec
    assert again.pools == loaded.spec.pools


def test_bad_pools_name_the_key(write_yaml, dataset):
    cases = [
        ({"reward": {"wrokers": 2}}, [], "pools.reward.wrokers"),
        ({}, ["pools.reward=3"], "pools.reward"),
        ({"driver": {}}, [], "pools.driver"),
        ({}, ["nodes.judge.pool=rewrd"], "nodes.judge.pool"),
        ({"reward": {}}, ["pools.traning.workers=2"], "pools.traning"),  # a typo: unused
    ]
    for pools, overrides, path in cases:
        with pytest.raises(SpecError) as info:
            load_pipeline(write_yaml(_reward_pipeline(dataset, pools)), overrides)
        assert info.value.path == path, (pools, overrides, info.value)
    with pytest.raises(SpecError) as info:
        load_pipeline(write_yaml(_reward_pipeline(dataset, {})))
    assert "unknown pool 'reward'" in info.value.message and "pools.reward" in info.value.message


def _plan(write_yaml, dataset, pools: dict, cluster: Cluster = ONE_BOX):
    loaded = load_pipeline(write_yaml(_reward_pipeline(dataset, pools)))
    return plan_placement(loaded.spec, build_graph(loaded), cluster, "pipeline.yaml")


def test_a_declared_pool_gets_its_own_worker_group(write_yaml, dataset):
    placement = _plan(write_yaml, dataset, {"reward": {"workers": 2, "cpus_per_worker": 2}})
    group = placement.groups["reward"]
    assert group.nodes == ["judge"] and group.workers == 2 and group.bundle == {"CPU": 2.0}
    assert not group.colocated and "judge" not in placement.driver_nodes


def test_any_two_pools_colocate(write_yaml, dataset):
    pools = {
        "reward": {"workers": 2, "cpus_per_worker": 3},
        "environment": {"workers": 2},
        "colocate": [["reward", "environment"]],
    }
    group = _plan(write_yaml, dataset, pools).groups["reward+environment"]
    assert group.colocated and group.bundle == {"CPU": 3.0} and group.nodes == ["judge"]


def test_an_oversubscribed_declared_pool_is_named(write_yaml, dataset):
    with pytest.raises(PlacementError) as info:
        _plan(write_yaml, dataset, {"reward": {"workers": 3, "cpus_per_worker": 4}})
    assert info.value.path == "pools.reward" and "pool reward asks for 3 worker(s)" in str(
        info.value
    )


def test_plan_refuses_an_oversubscribed_declared_pool(write_yaml, dataset, capsys):
    doc = _reward_pipeline(dataset, {"reward": {"workers": 4, "gpus_per_worker": 1}})
    doc["ray"] = {"num_cpus": 8, "num_gpus": 2}
    path = write_yaml(doc)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "pools.reward" in err and "pool reward asks for 4 worker(s)" in err
    doc["pools"]["reward"]["workers"] = 2
    assert main(["plan", str(write_yaml(doc))]) == 0
    out = capsys.readouterr().out
    assert "pool reward  split  placement group 2 x {CPU: 1, GPU: 1}" in out
    assert "runs judge" in out and "pool=reward" in out


@pytest.mark.slow
def test_a_declared_pool_hosts_a_node_on_ray(ray_local, write_yaml, dataset, tmp_path):
    doc = _reward_pipeline(dataset, {"reward": {"workers": 2, "cpus_per_worker": 0.5}})
    doc.update(iterations=1, storage={"uri": str(tmp_path / "runs")})
    run = start_run(write_yaml(doc))
    probe = drive_inline(run, 1).table("judge", 0)
    assert set(probe["world_size"].to_pylist()) == {2}  # ran on the reward pool's 2 workers
    assert len(set(probe["pid"].to_pylist())) == 2
    assert run.runner.placement.group_of("judge").name == "reward"
    run.close()


def test_interpolations_may_point_at_pools_and_async_keys(write_yaml, dataset):
    """`${pools.<name>.k}` and `${async.k}` resolve although those keys are stored as other
    fields (`pools.named`, `async_`), in the file and in overrides."""
    doc = _reward_pipeline(dataset, {"reward": {"workers": 2}})
    doc["async"] = {"max_staleness": 1}
    doc["nodes"]["prompts"]["params"]["batch_size"] = "${pools.reward.workers}"
    doc["nodes"]["prompts"]["params"]["seed"] = "${async.max_staleness}"
    overrides = ["pools.environment.workers=${pools.reward.workers}"]
    loaded = load_pipeline(write_yaml(doc), overrides)
    params = loaded.spec.nodes["prompts"].params
    assert params["batch_size"] == 2 and params["seed"] == 1
    assert loaded.spec.pools.named["environment"].workers == 2
    assert "${" not in loaded.resolved_yaml
