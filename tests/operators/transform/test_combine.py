"""Composed rewards: several score nodes into a `combine` transform. The combination equals
the hand-computed one, each component is its own column and `reward/<name>` metric, and the
wiring is checked like every edge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from operators.score.reward_service.combine import Combine, CombineMode, CombineParams, combined
from rldag.config.errors import InputError, SchemaError
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from rldag.graph.operator import NodeContext
from tests.support.pipelines import scoring_pipeline

CORRECT = np.array([1.0, 0.0, 1.0, 0.0])
STYLE = np.array([0.5, 0.9, -0.2, 0.0])


def test_weighted_sum_product_and_gate_equal_the_hand_computed_values():
    rewards = {"correct": CORRECT, "style": STYLE}
    total = combined(rewards, CombineParams(weights={"correct": 2.0, "style": 0.5}))
    assert total.tolist() == [2.25, 0.45, 1.9, 0.0]
    assert combined(rewards, CombineParams()).tolist() == [1.5, 0.9, 0.8, 0.0]  # weights 1
    product = combined(rewards, CombineParams(mode=CombineMode.product))
    assert product.tolist() == [0.5, 0.0, -0.2, 0.0]
    gate = CombineParams(mode=CombineMode.gate, gate="correct", fail_reward=-1.0)
    assert combined(rewards, gate).tolist() == [0.5, -1.0, -0.2, -1.0]
    alone = CombineParams(mode=CombineMode.gate, gate="correct", threshold=1.0)
    assert combined({"correct": CORRECT}, alone).tolist() == [1.0, 0.0, 1.0, 0.0]


def _scored(rewards: list[float], ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "prompt_id": pa.array(ids, pa.int64()),
            "sample_idx": pa.array([0] * len(ids), pa.int32()),
            "reward": pa.array(rewards, pa.float32()),
        }
    )


def test_components_are_matched_by_row_and_a_dropped_row_is_dropped():
    rollouts = pa.table(
        {
            "prompt_id": pa.array([0, 1, 2], pa.int64()),
            "sample_idx": pa.array([0, 0, 0], pa.int32()),
        }
    )
    inputs = {
        "rollouts": rollouts,
        "a": _scored([3.0, 1.0, 2.0], [2, 0, 1]),  # another order
        "b": _scored([10.0, 30.0], [0, 2]),  # row 1 was dropped by this component
    }
    out = Combine(CombineParams(weights={"a": 1.0, "b": 0.1}))(inputs, NodeContext("c", 0, 0, ""))
    assert out["prompt_id"].to_pylist() == [0, 2]
    assert out["reward_a"].to_pylist() == [1.0, 3.0]
    assert out["reward_b"].to_pylist() == [10.0, 30.0]
    assert out["reward"].to_pylist() == pytest.approx([2.0, 6.0])


def _composed(dataset: Path, params: dict, tmp_path: Path | None = None) -> dict:
    """The model-free pipeline with two score nodes on the answers and a combine."""
    doc = scoring_pipeline(dataset, ray={"enabled": False})
    nodes = doc["nodes"]
    nodes["style"] = {
        "kind": "score",
        "op": "tests.support.user_code:echo_score",
        "inputs": {"rollouts": "answer"},
    }
    nodes["reward"] = {
        "kind": "transform",
        "op": "combine",
        "inputs": {"rollouts": "answer", "correct": "score", "style": "style"},
        "params": params,
    }
    nodes["advantage"]["inputs"] = {"scored": "reward"}
    if tmp_path is not None:
        doc["storage"] = {"uri": str(tmp_path / "runs")}
    return doc


def test_a_composed_reward_runs_and_reports_each_component(dataset, tmp_path, run_pipeline):
    params = {"weights": {"correct": 2.0, "style": 0.5}}
    run = run_pipeline(_composed(dataset, params, tmp_path), iterations=2)
    for i in range(2):
        score = run.table("score", i)
        out = run.table("reward", i)
        expected = [2.0 * r + 0.5 * r for r in score["reward"].to_pylist()]
        assert out["reward"].to_pylist() == pytest.approx(expected)
        assert out["reward_correct"].to_pylist() == score["reward"].to_pylist()
    for row, i in zip(run.metrics(), range(2), strict=True):
        score = run.table("score", i)
        mean = float(np.mean(score["reward"].to_numpy()))
        assert row["reward/correct"] == pytest.approx(mean)
        assert row["reward/style"] == pytest.approx(mean)
        assert row["reward/mean"] == pytest.approx(2.5 * mean)  # the combination, not a part


def test_each_component_is_a_column_of_the_edge(write_yaml, dataset):
    graph = build_graph(load_pipeline(write_yaml(_composed(dataset, {}))))
    names = graph.nodes["reward"].output.names
    assert names[-3:] == ["reward_correct", "reward_style", "reward"]
    assert graph.nodes["reward"].output.field("reward_style").type == pa.float32()


def test_composed_rewards_are_checked_like_every_edge(write_yaml, dataset):
    cases = [
        ({"weights": {"corect": 1.0}}, InputError, "nodes.reward.params.weights.corect"),
        ({"mode": "gate"}, InputError, "nodes.reward.params.gate"),
        ({"mode": "product", "weights": {"style": 2.0}}, InputError, "nodes.reward.params.weights"),
        ({"gate": "correct"}, InputError, "nodes.reward.params.gate"),
    ]
    for params, error, path in cases:
        with pytest.raises(error) as info:
            build_graph(load_pipeline(write_yaml(_composed(dataset, params))))
        assert info.value.path == path, (params, info.value)
    doc = _composed(dataset, {})
    doc["nodes"]["reward"]["inputs"]["style"] = "prompts"  # no reward column there
    with pytest.raises(SchemaError) as info:
        build_graph(load_pipeline(write_yaml(doc)))
    assert info.value.path == "nodes.reward.inputs.style" and "'reward'" in info.value.message
