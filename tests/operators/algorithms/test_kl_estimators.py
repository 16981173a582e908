"""KL estimators and loss aggregations by name against independent implementations of
their definitions (Schulman, "Approximating KL divergence", 2020; veRL's loss_agg_mode)."""

from __future__ import annotations

import math

import pytest
import torch

from operators.algorithms.aggregation import LOSS_AGGREGATIONS
from operators.algorithms.kl import KL_ESTIMATORS

LOGP = [-0.3, -2.0, -1.1, -4.0]
REF = [-0.9, -1.2, -1.1, -2.5]


def schulman(kind: str, logp: float, ref: float) -> float:
    """With samples x ~ p and r = q(x) / p(x): k1 = -log r, k2 = (log r)^2 / 2,
    k3 = (r - 1) - log r; abs = |log r|."""
    log_r = ref - logp
    return {
        "k1": -log_r,
        "k2": 0.5 * log_r**2,
        "k3": (math.exp(log_r) - 1) - log_r,
        "abs": abs(log_r),
    }[kind]


@pytest.mark.parametrize(
    ("name", "kind"),
    [("k1", "k1"), ("kl", "k1"), ("k2", "k2"), ("mse", "k2"), ("k3", "k3")]
    + [("low_var_kl", "k3"), ("abs", "abs")],
)
def test_kl_estimators_match_their_definitions(name, kind):
    got = KL_ESTIMATORS.get(name)(torch.tensor(LOGP), torch.tensor(REF))
    expected = [schulman(kind, a, b) for a, b in zip(LOGP, REF, strict=True)]
    torch.testing.assert_close(got, torch.tensor(expected), rtol=1e-6, atol=1e-7)


def test_aggregations_match_their_definitions():
    losses = [[1.0, 2.0, 7.0], [4.0, 0.5, 3.0]]
    mask = [[1, 1, 0], [1, 1, 1]]
    kept = [
        [x for x, m in zip(row, ms, strict=True) if m] for row, ms in zip(losses, mask, strict=True)
    ]
    expected = {
        "token-mean": sum(map(sum, kept)) / sum(map(len, kept)),
        "seq-mean-token-sum": sum(sum(r) for r in kept) / len(kept),
        "seq-mean-token-mean": sum(sum(r) / len(r) for r in kept) / len(kept),
    }
    for mode, value in expected.items():
        got = LOSS_AGGREGATIONS.get(mode)(
            torch.tensor(losses), torch.tensor(mask, dtype=torch.float32)
        )
        assert got.item() == pytest.approx(value, rel=1e-6)
