"""`rldag plan --auto`: the search over placements picks the known-best one on a synthetic
cost table, respects the overlap rule, placement fit and memory, and writes an overrides
file that `rldag validate` accepts; an impossible cluster exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.cli import main
from rldag.config.errors import InputError
from rldag.config.overrides import read_overrides_file
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from rldag.planning.auto_plan import Limits, parse_cluster, partitions, search
from rldag.planning.costs import CostModel, NodeCost
from tests.support.pipelines import grpo_nodes


def grpo_doc(dataset: Path, tmp_path: Path) -> dict:
    doc = {
        "name": "g",
        "model": {"path": "m"},
        "storage": {"uri": str(tmp_path / "runs")},
        "nodes": grpo_nodes("m", dataset, "tests.support.user_code:echo_score"),
    }
    doc["nodes"]["prompts"]["params"]["batch_size"] = 6  # the dataset's rows
    return doc


def synthetic_costs(params: int = 1000) -> CostModel:
    """Generation: 1 s of fixed latency per call (it does not shrink with workers) plus 1 s
    of work per iteration; training 1 s of work. On 4 workers the best is split pools with
    3 rollout workers and 1 trainer at k=1: max(1 + 1/3, 1) = 1.33 s per iteration, against
    1 + 1/4 + 1/4 = 1.5 s colocated on 4 and max(1 + 1/2, 1/2) = 1.5 s split 2 + 2."""
    nodes = {
        "generate": NodeCost("generate", "generate", "rollout", 1.0, 0.25, 0.0, 1, 4.0, 0.0),
        "train": NodeCost("train", "train", "training", 0.0, 0.25, 0.0, 1, 4.0, 0.0),
    }
    return CostModel(nodes, {"split": 0.0, "colocated": 0.0}, params, 0.0, 32.0, 4.0)


@pytest.fixture
def loader(write_yaml, dataset, tmp_path):
    path = write_yaml(grpo_doc(dataset, tmp_path))

    def load(extra: list[str]):
        loaded = load_pipeline(path, extra)
        return loaded, build_graph(loaded)

    load.path = path
    return load


def test_partitions_are_every_grouping_once() -> None:
    found = [sorted(tuple(sorted(b)) for b in p) for p in partitions(["a", "b", "c"])]
    assert len(found) == 5 and len({str(f) for f in found}) == 5  # Bell number B3
    assert [("a",), ("b",), ("c",)] in found and [("a", "b", "c")] in found


def test_planner_picks_the_known_best_placement(loader) -> None:
    found = search(loader, synthetic_costs(), parse_cluster("1x4cpu"), Limits(max_staleness=2))
    best = found.ranked[0]
    assert best.candidate.colocate == (("rollout",), ("training",)) or set(
        best.candidate.colocate
    ) == {("rollout",), ("training",)}
    assert dict(best.candidate.workers) == {"rollout": 3, "training": 1}
    assert best.candidate.max_staleness == 1  # k=2 is as fast: the smaller bound wins
    assert best.result.samples_per_s == pytest.approx(32 / (4 / 3))
    colocated = [r for r in found.ranked if len(r.candidate.colocate) == 1]
    assert max(r.result.samples_per_s for r in colocated) == pytest.approx(32 / 1.5)
    # the overlap rule: k > 0 with generate and train sharing workers never ranks
    assert all(r.candidate.max_staleness == 0 for r in colocated)
    assert any("overlaps generation with training" in why for _, why in found.refused)


def test_candidates_that_do_not_fit_are_refused_by_the_placement_check(loader) -> None:
    found = search(loader, synthetic_costs(), parse_cluster("1x2cpu"), Limits(max_staleness=1))
    assert all(
        sum(w for p, w in r.candidate.workers if len(r.candidate.colocate) == 2) <= 2
        for r in found.ranked
    )
    assert any("asks for" in why for _, why in found.refused)


def test_memory_per_worker_from_the_model_size_bounds_the_search(loader) -> None:
    # 7e9 parameters: a trainer needs 112 GB over its workers, a rollout copy 20 GB
    costs = synthetic_costs(params=7_000_000_000)
    found = search(loader, costs, parse_cluster("1x8gpu"), Limits(gpu_memory_gb=80))
    assert found.ranked
    for r in found.ranked:
        assert all(gb <= 80 for gb in r.memory_gb.values())
    assert any("needs" in why and "GB" in why for _, why in found.refused)
    assert all(dict(r.candidate.workers)["training"] >= 2 for r in found.ranked)


def test_apply_writes_overrides_that_validate(loader, tmp_path, capsys) -> None:
    table = tmp_path / "costs.parquet"
    import pyarrow.parquet as pq

    pq.write_table(synthetic_costs().to_table(), table)
    out = tmp_path / "best.yaml"
    args = ["plan", str(loader.path), "--costs", str(table), "--auto", "--cluster", "1x4cpu"]
    assert main([*args, "--apply", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "placements fit" in printed and "wrote" in printed
    written = yaml.safe_load(out.read_text())
    assert written["pools"]["colocate"] == [] and written["async"]["max_staleness"] == 1
    assert "predicted 24.0 samples/s" in out.read_text()
    assert written["pools"]["rollout"]["workers"] == 3
    assert main(["validate", str(loader.path), "-f", str(out)]) == 0
    loaded = load_pipeline(loader.path, read_overrides_file(out))
    assert loaded.spec.pools.named["rollout"].workers == 3 and loaded.spec.async_.max_staleness == 1


def test_an_impossible_cluster_exits_2(loader, tmp_path, capsys) -> None:
    table = tmp_path / "costs.csv"
    import pyarrow.csv

    pyarrow.csv.write_csv(synthetic_costs().to_table(), table)
    args = ["plan", str(loader.path), "--costs", str(table), "--auto"]
    assert main([*args, "--cluster", "1x0cpu"]) == 2
    assert "no placement" in capsys.readouterr().err
    assert main([*args, "--cluster", "eight-gpus"]) == 2
    assert "--cluster" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_an_overrides_file_that_is_not_a_mapping_is_a_spec_error(tmp_path) -> None:
    bad = tmp_path / "o.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(InputError, match="mapping"):
        read_overrides_file(bad)
