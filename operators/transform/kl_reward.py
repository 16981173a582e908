"""`kl_reward` transform: KL to the reference in the reward (veRL's in-reward KL penalty):
reward <- reward - kl_coef * sum_t kl_t(behaviour || reference), before the advantage.
The sum runs over the model's own tokens (`response_mask` 1, when that column exists)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from operators.algorithms.kl import KL_ESTIMATORS
from operators.transform.reward_shaping import with_shaped_reward
from rldag import NodeContext, NodeKind, OperatorDef, Port, check_positive, col, columns


def sequence_kl(
    logp: list[list[float]],
    ref_logp: list[list[float]],
    kind: str,
    masks: list[list[int]] | None = None,
) -> np.ndarray:
    """Per-sequence sum of the per-token KL estimate (over tokens whose mask is 1)."""
    estimator = KL_ESTIMATORS.get(kind)
    masks = masks if masks is not None else [[1] * len(a) for a in logp]
    return np.array(
        [
            float((estimator(torch.tensor(a), torch.tensor(b)) * torch.tensor(m)).sum())
            for a, b, m in zip(logp, ref_logp, masks, strict=True)
        ],
        dtype=np.float32,
    )


@dataclass
class KLRewardParams:
    """Parameters of `kl_reward`."""

    kl_coef: float = 0.001
    kl_estimator: str = "k1"  # k1 | k2 (mse) | k3 (low_var_kl) | abs

    def __post_init__(self) -> None:
        check_positive("kl_coef", self.kl_coef, allow_zero=True)
        KL_ESTIMATORS.check("kl_estimator", self.kl_estimator)


class KLReward:
    """Subtracts the scaled sequence KL from `reward`; keeps the KL as `kl`."""

    def __init__(self, params: KLRewardParams) -> None:
        self.p = params

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["scored"]
        kl = sequence_kl(
            table["response_logprobs"].to_pylist(),
            table["ref_logprobs"].to_pylist(),
            self.p.kl_estimator,
            table["response_mask"].to_pylist() if "response_mask" in table.column_names else None,
        )
        reward = table["reward"].to_numpy() - self.p.kl_coef * kl
        return with_shaped_reward(table, reward, "kl", kl)


KL_REWARD = OperatorDef(
    name="kl_reward",
    kind=NodeKind.transform,
    factory=KLReward,
    ports=(Port("scored", columns("reward", "response_logprobs", "ref_logprobs")),),
    adds=(col("reward"), col("kl", pa.float32())),
    params=KLRewardParams,
    streams=True,
    description="KL penalty in the reward: reward - kl_coef * KL(behaviour || reference).",
)
