"""REINFORCE++ advantages (Hu et al. 2025), whitened over the whole batch's tokens.

- `reinforce_plus_plus`: the outcome reward sits on the last counted token; each counted
  token's return is the discounted sum of the rewards after it (gamma per counted token:
  environment tokens, mask 0, are not steps of the policy); returns are whitened over every
  counted token of the batch. Token-level: [rows, tokens].
- `reinforce_plus_plus_baseline`: r minus its group's mean reward, then whitened over every
  counted token of the batch (so a row weighs by its length). Constant along a row: [rows].

Whitening is (x - mean) / (std + eps) with Bessel's correction, as for GRPO.
"""

from __future__ import annotations

import numpy as np

from operators.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    MissingInputError,
    Scope,
    group_stats,
    scope,
)


def _counted(inputs: AdvantageInputs, estimator: str) -> np.ndarray:
    if inputs.mask is None:
        raise MissingInputError(f"{estimator} needs the response tokens (response_ids)")
    return np.asarray(inputs.mask, dtype=np.float64)


def discounted_outcome_returns(rewards: np.ndarray, mask: np.ndarray, gamma: float) -> np.ndarray:
    """[rows, tokens] returns of an outcome reward placed on each row's last counted token:
    gamma ** (counted tokens after t) * r on counted tokens, 0 elsewhere."""
    after = np.cumsum(mask[:, ::-1], axis=1)[:, ::-1] - mask  # counted tokens after t
    return np.asarray(rewards, dtype=np.float64)[:, None] * gamma**after * mask


def whiten(values: np.ndarray, weights: np.ndarray, eps: float) -> np.ndarray:
    """(values - mean) / (std + eps), mean and std (Bessel) over the weighted positions."""
    count = weights.sum()
    mean = (values * weights).sum() / max(count, 1.0)
    var = (((values - mean) ** 2) * weights).sum() / max(count - 1.0, 1.0)
    return (values - mean) / (np.sqrt(var) + eps)


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")
@scope(Scope.batch)  # whitened over the batch
def reinforce_plus_plus(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """Discounted token returns, whitened over the batch's counted tokens."""
    mask = _counted(inputs, "reinforce_plus_plus")
    returns = discounted_outcome_returns(inputs.rewards, mask, config.gamma)
    return (whiten(returns, mask, config.eps) * mask).astype(np.float32)


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline")
@scope(Scope.batch)  # whitened over the batch
def reinforce_plus_plus_baseline(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """Group-mean baseline, then whitened over the batch's counted tokens."""
    lengths = _counted(inputs, "reinforce_plus_plus_baseline").sum(-1)
    rewards = np.asarray(inputs.rewards, dtype=np.float64)
    inverse, _, means = group_stats(rewards, inputs.groups)
    return whiten(rewards - means[inverse], lengths, config.eps).astype(np.float32)
