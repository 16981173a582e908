"""GAE from a critic's values: by hand, against the paper's sum of discounted TD errors
written here, and skipping masked (environment) tokens."""

from __future__ import annotations

import statistics

import numpy as np
import pyarrow as pa
import pytest

from operators.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    MissingInputError,
)
from operators.algorithms.gae import gae
from operators.transform.advantage import Advantage, EstimatorParams
from rldag.graph.operator import NodeContext


def test_gae_by_hand():
    # reward 1 on the last of 2 tokens, V = 0.5, 0.8. gamma = lam = 1: deltas 0.3, 0.2 ->
    # A = 0.5, 0.2 (A_0 = R - V_0); returns 1, 1.
    adv, ret = gae(np.array([1.0]), np.array([[0.5, 0.8]]), np.ones((1, 2)), 1.0, 1.0)
    np.testing.assert_allclose(adv, [[0.5, 0.2]])
    np.testing.assert_allclose(ret, [[1.0, 1.0]])
    # gamma 0.9, lam 0.5: delta_0 = 0.9 * 0.8 - 0.5 = 0.22; A_0 = 0.22 + 0.45 * 0.2
    adv, ret = gae(np.array([1.0]), np.array([[0.5, 0.8]]), np.ones((1, 2)), 0.9, 0.5)
    np.testing.assert_allclose(adv, [[0.31, 0.2]])
    np.testing.assert_allclose(ret, [[0.81, 1.0]])


def test_gae_skips_masked_tokens():
    # a tool token between the two model tokens: its value (99) and position play no part
    adv, ret = gae(np.array([1.0]), np.array([[0.5, 99.0, 0.8]]), np.array([[1, 0, 1]]), 1.0, 1.0)
    np.testing.assert_allclose(adv, [[0.5, 0.0, 0.2]])
    np.testing.assert_allclose(ret, [[1.0, 0.0, 1.0]])


def paper_gae(rewards, values, mask, gamma, lam):
    """Schulman et al. 2016 eq. 16: A_t = sum_l (gamma lam)^l delta_(t+l), with
    delta_t = r_t + gamma V(s_(t+1)) - V(s_t), over the policy's own steps; the reward is the
    outcome, given at the last step; V after the last step is 0."""
    out = np.zeros_like(values, dtype=np.float64)
    for i, row in enumerate(mask):
        steps = [t for t, m in enumerate(row) if m]
        v = [values[i][t] for t in steps] + [0.0]
        r = [0.0] * (len(steps) - 1) + [rewards[i]]
        deltas = [r[k] + gamma * v[k + 1] - v[k] for k in range(len(steps))]
        for k, t in enumerate(steps):
            out[i, t] = sum((gamma * lam) ** j * deltas[k + j] for j in range(len(steps) - k))
    return out


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.8, 0.0)])
def test_gae_matches_the_paper(gamma, lam):
    rng = np.random.default_rng(11)
    rewards = rng.choice([0.0, 1.0], size=6)
    values = rng.normal(size=(6, 5))
    mask = (rng.random((6, 5)) > 0.3).astype(np.float64)
    mask[:, 0] = 1
    adv, _ = gae(rewards, values, mask, gamma, lam)
    expected = paper_gae(rewards, values, mask, gamma, lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-9, atol=1e-12)
    # the estimator whitens over the batch's model tokens
    inputs = AdvantageInputs(rewards, np.arange(6), mask, values=values)
    got = ADVANTAGE_ESTIMATORS.get("gae")(inputs, AdvantageConfig(gamma=gamma, lam=lam))
    flat = [expected[i, t] for i in range(6) for t in range(5) if mask[i, t]]
    mean, std = statistics.mean(flat), statistics.stdev(flat)
    np.testing.assert_allclose(got, (expected - mean) / (std + 1e-6) * mask, rtol=1e-5, atol=1e-6)


def test_gae_in_the_advantage_transform_reads_the_values_column():
    table = pa.table(
        {
            "prompt_id": pa.array([1, 2], pa.int64()),
            "reward": pa.array([1.0, 0.0], pa.float32()),
            "response_ids": pa.array([[4, 5], [6]], pa.list_(pa.int32())),
            "values": pa.array([[0.5, 0.8], [0.3]], pa.list_(pa.float32())),
        }
    )
    ctx = NodeContext(node="adv", iteration=0, seed=0, run_uri="")
    out = Advantage(EstimatorParams(estimator="gae"))({"scored": table}, ctx)
    # raw A: [0.5, 0.2] and [-0.3]; whitened over the 3 tokens
    raw = [0.5, 0.2, -0.3]
    mean, std = statistics.mean(raw), statistics.stdev(raw)
    tokens = out["token_advantage"].to_pylist()
    np.testing.assert_allclose(
        tokens[0] + tokens[1], [(a - mean) / (std + 1e-6) for a in raw], rtol=1e-5
    )
    with pytest.raises(MissingInputError, match="values"):
        ADVANTAGE_ESTIMATORS.get("gae")(
            AdvantageInputs(np.ones(1), np.zeros(1), np.ones((1, 1))), AdvantageConfig()
        )
