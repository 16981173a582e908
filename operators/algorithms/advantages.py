"""Advantage estimators by name (veRL's `adv_estimator`), outcome-reward ones here:
grpo, dr_grpo, rloo, remax. Token-level ones are in operators.algorithms.reinforce (REINFORCE++)
and operators.algorithms.gae (GAE from a critic's values).

An estimator maps AdvantageInputs and an AdvantageConfig to numpy advantages: shape [rows]
(one per sequence, broadcast over its tokens by the trainer) or [rows, tokens] (per token,
aligned with `response_ids`, 0 where the mask is 0).

Each estimator declares its `Scope` (`@scope(Scope.group)`): per-group ones run on each
streamed chunk of whole prompt groups; batch-wide ones (whitening over the batch) wait for
the whole table, as does user code that declares none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from rldag import Registry


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read, per row of the scored table."""

    rewards: np.ndarray  # [rows] outcome reward
    groups: np.ndarray  # [rows] prompt id: the n samples of a prompt form a group
    mask: np.ndarray | None = None  # [rows, tokens] 1 on the policy's own response tokens
    baseline: np.ndarray | None = None  # [rows] remax: the reward of the prompt's greedy answer
    values: np.ndarray | None = None  # [rows, tokens] gae: a critic's value of each token


@dataclass(frozen=True)
class AdvantageConfig:
    """The `advantage` node's params every estimator may read."""

    norm_by_std: bool = True  # grpo: divide by the group's std
    eps: float = 1e-6  # added to every std it divides by
    gamma: float = 1.0  # reinforce_plus_plus, gae: discount per token
    lam: float = 1.0  # gae: the bias/variance trade-off lambda


class MissingInputError(ValueError):
    """The estimator needs an input this table does not have (a port, a column)."""


Estimator = Callable[[AdvantageInputs, AdvantageConfig], np.ndarray]
ADVANTAGE_ESTIMATORS: Registry[Estimator] = Registry(
    "advantage estimator", modules=("operators.algorithms.reinforce", "operators.algorithms.gae")
)


class Scope(StrEnum):
    """Which rows a row's advantage depends on."""

    group = "group"  # its prompt group's: the estimator runs per streamed chunk
    batch = "batch"  # the whole batch's (whitening): the node waits for the whole table


def scope(kind: Scope) -> Callable[[Estimator], Estimator]:
    """Declare an estimator's scope (a decorator; user estimators may use it too)."""

    def mark(estimator: Estimator) -> Estimator:
        estimator.scope = kind  # type: ignore[attr-defined]
        return estimator

    return mark


def scope_of(estimator: Estimator) -> Scope:
    """An estimator's declared scope; one that declares none is taken as batch-wide."""
    return getattr(estimator, "scope", Scope.batch)


def group_stats(rewards: np.ndarray, group_ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each row's group index, the groups' sizes and the groups' mean rewards."""
    _, inverse, counts = np.unique(group_ids, return_inverse=True, return_counts=True)
    means = np.bincount(inverse, weights=rewards) / counts
    return inverse, counts, means


def grpo_advantages(
    rewards: np.ndarray, group_ids: np.ndarray, *, norm_by_std: bool = True, eps: float = 1e-6
) -> np.ndarray:
    """Per-sample advantages: reward minus its group's mean, optionally over the group's std
    (with Bessel's correction, as in veRL). A group of one sample gets advantage 0."""
    rewards = np.asarray(rewards, dtype=np.float64)
    inverse, counts, means = group_stats(rewards, group_ids)
    centered = rewards - means[inverse]
    if not norm_by_std:
        return np.where(counts[inverse] > 1, centered, 0.0).astype(np.float32)
    sq = np.bincount(inverse, weights=centered**2)
    dof = np.maximum(counts - 1, 1)
    std = np.sqrt(sq / dof)
    adv = centered / (std[inverse] + eps)
    return np.where(counts[inverse] > 1, adv, 0.0).astype(np.float32)


@ADVANTAGE_ESTIMATORS.register("grpo")
@scope(Scope.group)
def grpo(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """GRPO (Shao et al. 2024): (r - mean_group) / (std_group + eps)."""
    return grpo_advantages(
        inputs.rewards, inputs.groups, norm_by_std=config.norm_by_std, eps=config.eps
    )


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
@scope(Scope.group)
def dr_grpo(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """Dr.GRPO (Liu et al. 2025): r - mean_group, no std (pair it with a sum aggregation)."""
    return grpo_advantages(inputs.rewards, inputs.groups, norm_by_std=False)


@ADVANTAGE_ESTIMATORS.register("rloo")
@scope(Scope.group)
def rloo(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """RLOO (Ahmadian et al. 2024): r_i minus the mean of the other samples of its group,
    i.e. n / (n - 1) * (r_i - mean_group). A group of one sample gets advantage 0."""
    rewards = np.asarray(inputs.rewards, dtype=np.float64)
    inverse, counts, means = group_stats(rewards, inputs.groups)
    n = counts[inverse].astype(np.float64)
    adv = n / np.maximum(n - 1, 1) * (rewards - means[inverse])
    return np.where(n > 1, adv, 0.0).astype(np.float32)


@ADVANTAGE_ESTIMATORS.register("remax")
@scope(Scope.group)
def remax(inputs: AdvantageInputs, config: AdvantageConfig) -> np.ndarray:
    """ReMax (Li et al. 2024): r minus the reward of the greedy answer to the same prompt."""
    if inputs.baseline is None:
        raise MissingInputError("remax needs the greedy rollout's rewards on the `baseline` port")
    rewards = np.asarray(inputs.rewards, dtype=np.float64)
    return (rewards - np.asarray(inputs.baseline, dtype=np.float64)).astype(np.float32)
