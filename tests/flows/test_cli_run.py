"""`rldag run` loads, builds and places the pipeline once: the flow it starts in the same
process takes what the command prepared (flows.prepared) instead of doing it again."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

import flows.rl_loop  # noqa: F401  (imported late by the CLI: loaded before counting)
from flows import prepared
from flows.cli import main
from rldag.compute import placement
from rldag.compute.placement import local_cluster
from rldag.graph import dag
from tests.support.pipelines import scoring_pipeline
from tests.support.ray_free import count_calls, without_ray


def test_rldag_run_builds_and_places_the_pipeline_once(
    prefect_api, write_yaml, dataset, tmp_path, monkeypatch
):
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")}, iterations=1)
    doc["nodes"]["score"]["pool"] = "environment"  # a Ray pool: the run is placed
    doc["ray"] = {"num_cpus": 2, "num_gpus": 0}
    without_ray(monkeypatch, lambda: local_cluster(2, 0))  # Ray finds what the CLI expected
    builds = count_calls(monkeypatch, dag.build_graph)
    placements = count_calls(monkeypatch, placement.plan_placement)

    assert main(["run", str(write_yaml(doc))]) == 0
    assert (len(builds), len(placements)) == (1, 1)
    assert prepared._PREPARED == {}  # the flow took it
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert pq.read_table(run_dir / "metrics.parquet")["iteration"].to_pylist() == [0]
    assert (run_dir / "reward_curve.png").is_file()  # the flow's closing hook stored it


def test_without_ray_nothing_is_placed_and_the_graph_built_once(
    prefect_api, write_yaml, dataset, tmp_path, monkeypatch
):
    doc = scoring_pipeline(dataset, storage={"uri": str(tmp_path / "runs")}, iterations=1)
    doc["ray"] = {"enabled": False}
    builds = count_calls(monkeypatch, dag.build_graph)
    placements = count_calls(monkeypatch, placement.plan_placement)

    assert main(["run", str(write_yaml(doc))]) == 0
    assert (len(builds), len(placements)) == (1, 0)
    assert len(list(Path(tmp_path / "runs").iterdir())) == 1
