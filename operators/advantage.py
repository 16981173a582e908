"""`grpo_advantage` transform: group-relative advantages over the n samples of each prompt.

GRPO: (r - mean_group) / (std_group + eps), std with Bessel's correction as in veRL;
Dr.GRPO-style mean-only with `norm_by_std: false`. A group of one sample gets advantage 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rldag.operator import NodeContext, OperatorDef, Port
from rldag.schema import col, columns
from rldag.spec import NodeKind


def grpo_advantages(
    rewards: np.ndarray, group_ids: np.ndarray, *, norm_by_std: bool = True, eps: float = 1e-6
) -> np.ndarray:
    """Per-sample advantages: reward minus its group's mean, optionally over the group's std."""
    rewards = np.asarray(rewards, dtype=np.float64)
    _, inverse, counts = np.unique(group_ids, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=rewards)
    means = sums / counts
    centered = rewards - means[inverse]
    if not norm_by_std:
        return np.where(counts[inverse] > 1, centered, 0.0).astype(np.float32)
    sq = np.bincount(inverse, weights=centered**2)
    dof = np.maximum(counts - 1, 1)
    std = np.sqrt(sq / dof)
    adv = centered / (std[inverse] + eps)
    return np.where(counts[inverse] > 1, adv, 0.0).astype(np.float32)


@dataclass
class AdvantageParams:
    """Parameters of `grpo_advantage`."""

    norm_by_std: bool = True  # false: Dr.GRPO (mean-centred only)
    eps: float = 1e-6  # added to the group std


class GroupAdvantage:
    """Adds `advantage` to a scored rollout table, grouped by `prompt_id`."""

    def __init__(self, params: AdvantageParams) -> None:
        self.params = params

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["scored"]
        adv = grpo_advantages(
            table["reward"].to_numpy(),
            table["prompt_id"].to_numpy(),
            norm_by_std=self.params.norm_by_std,
            eps=self.params.eps,
        )
        return table.append_column("advantage", pa.array(adv, pa.float32()))


GRPO_ADVANTAGE = OperatorDef(
    name="grpo_advantage",
    kind=NodeKind.transform,
    factory=GroupAdvantage,
    ports=(Port("scored", columns("prompt_id", "reward")),),
    adds=(col("advantage"),),
    params=AdvantageParams,
    streams=True,  # a chunk holds whole prompt groups
    description="GRPO group-normalised advantages (or Dr.GRPO mean-only).",
)
