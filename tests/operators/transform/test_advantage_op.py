"""The `advantage` transform: any estimator by name; `advantage` per sequence and
`token_advantage` aligned with `response_ids` (0 on environment tokens); remax's baseline
from its own port; `grpo_advantage` stays the GRPO-only alias."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from operators.algorithms.advantages import AdvantageConfig, AdvantageInputs
from operators.algorithms.reinforce import reinforce_plus_plus
from operators.transform.advantage import (
    Advantage,
    AdvantageParams,
    EstimatorParams,
    GroupAdvantage,
)
from rldag.config.errors import InputError
from rldag.graph.operator import NodeContext

CTX = NodeContext(node="adv", iteration=0, seed=0, run_uri="")


def scored(response_mask: bool = True) -> pa.Table:
    columns = {
        "prompt_id": pa.array([4, 4, 9, 9], pa.int64()),
        "reward": pa.array([1.0, 0.0, 0.5, 0.5], pa.float32()),
        "response_ids": pa.array([[3, 4, 5], [6], [7, 8], [9, 9, 9]], pa.list_(pa.int32())),
    }
    if response_mask:
        columns["response_mask"] = pa.array(
            [[1, 0, 1], [1], [1, 1], [1, 1, 0]], pa.list_(pa.int8())
        )
    return pa.table(columns)


def run(estimator: str, table: pa.Table, baseline: pa.Table | None = None, **params) -> pa.Table:
    inputs = {"scored": table} | ({"baseline": baseline} if baseline is not None else {})
    return Advantage(EstimatorParams(estimator=estimator, **params))(inputs, CTX)


def test_grpo_by_name_equals_the_alias_and_broadcasts_over_model_tokens():
    out = run("grpo", scored())
    alias = GroupAdvantage(AdvantageParams())({"scored": scored()}, CTX)
    assert out["advantage"].equals(alias["advantage"])
    a = out["advantage"].to_pylist()
    assert out["token_advantage"].to_pylist() == [
        [a[0], 0.0, a[0]],
        [a[1]],
        [0.0, 0.0],
        [0.0, 0.0, 0.0],
    ]
    assert out.schema.field("token_advantage").type == pa.list_(pa.float32())


def test_token_level_estimator_fills_tokens_and_averages_them_per_sequence():
    out = run("reinforce_plus_plus", scored(), gamma=0.9)
    mask = np.array([[1, 0, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=np.float64)
    inputs = AdvantageInputs(np.array([1.0, 0.0, 0.5, 0.5]), np.array([4, 4, 9, 9]), mask)
    expected = reinforce_plus_plus(inputs, AdvantageConfig(gamma=0.9))
    tokens = out["token_advantage"].to_pylist()
    for row, n in enumerate([3, 1, 2, 3]):
        np.testing.assert_allclose(tokens[row], expected[row, :n], rtol=1e-6)
    means = (expected * mask).sum(-1) / mask.sum(-1)
    np.testing.assert_allclose(out["advantage"].to_numpy(), means, rtol=1e-6)


def test_remax_reads_the_greedy_rewards_by_prompt():
    baseline = pa.table(
        {"prompt_id": pa.array([9, 4], pa.int64()), "reward": pa.array([1.0, 0.0], pa.float32())}
    )
    out = run("remax", scored(False), baseline)
    np.testing.assert_allclose(out["advantage"].to_numpy(), [1.0, 0.0, -0.5, -0.5])


def test_remax_without_a_baseline_row_or_port_is_bad_input():
    baseline = pa.table(
        {"prompt_id": pa.array([4], pa.int64()), "reward": pa.array([0.0], pa.float32())}
    )
    with pytest.raises(InputError, match="no baseline row for prompt_id 9") as err:
        run("remax", scored(), baseline)
    assert err.value.path == "nodes.adv.inputs.baseline"
    with pytest.raises(InputError, match="remax needs the greedy rollout") as err:
        run("remax", scored())
    assert err.value.path == "nodes.adv"


def test_a_misaligned_response_mask_is_refused():
    table = scored(False).append_column(
        "response_mask", pa.array([[1], [1], [1, 1], [1, 1, 1]], pa.list_(pa.int8()))
    )
    with pytest.raises(InputError, match="column 'response_mask' row 0 has 1 values for 3"):
        run("grpo", table)
