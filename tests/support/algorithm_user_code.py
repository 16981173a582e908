"""User RL math referenced from tests as `tests.support.algorithm_user_code:<name>`."""

from __future__ import annotations

import numpy as np

from operators.algorithms.advantages import AdvantageConfig, AdvantageInputs


def reward_as_advantage(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """An estimator with no baseline: the advantage is the reward."""
    return np.asarray(inputs.rewards, dtype=np.float32)


NOT_A_FUNCTION = 3
