"""Generalized advantage estimation (Schulman et al. 2016) from a critic's per-token values.

The outcome reward sits on the last model token; environment tokens (mask 0) are not steps,
so a model token's successor is the next model token. Per step
delta_t = r_t + gamma * V(next step) - V_t (V after the last step is 0) and
A_t = sum_l (gamma * lam)^l delta_(t+l); the critic's targets are the returns A_t + V_t.
The `gae` estimator whitens A over the batch's model tokens, as veRL and OpenRLHF do.
"""

from __future__ import annotations

import numpy as np

from operators.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    MissingInputError,
    Scope,
    scope,
)
from operators.algorithms.reinforce import whiten


def gae(
    rewards: np.ndarray, values: np.ndarray, mask: np.ndarray, gamma: float, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """[rows, tokens] advantages and returns, 0 where the mask is 0."""
    mask = np.asarray(mask, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64) * mask
    rows, width = mask.shape
    last = width - 1 - np.argmax(mask[:, ::-1], axis=1)  # each row's last model token
    token_rewards = np.zeros((rows, width))
    has_tokens = mask.sum(-1) > 0
    token_rewards[np.flatnonzero(has_tokens), last[has_tokens]] = np.asarray(rewards)[has_tokens]
    advantages = np.zeros((rows, width))
    next_value, running = np.zeros(rows), np.zeros(rows)
    for t in reversed(range(width)):
        step = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        running = np.where(step > 0, delta + gamma * lam * running, running)
        next_value = np.where(step > 0, values[:, t], next_value)
        advantages[:, t] = running * step
    return advantages, (advantages + values) * mask


@ADVANTAGE_ESTIMATORS.register("gae")
@scope(Scope.batch)  # whitened over the batch
def gae_estimator(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """GAE advantages from the `values` column, whitened over the batch's model tokens."""
    if inputs.mask is None or inputs.values is None:
        raise MissingInputError("gae needs a critic's per-token `values` column")
    advantages, _ = gae(inputs.rewards, inputs.values, inputs.mask, config.gamma, config.lam)
    return (whiten(advantages, inputs.mask, config.eps) * inputs.mask).astype(np.float32)
