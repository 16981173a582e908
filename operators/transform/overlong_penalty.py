"""`overlong_penalty` transform: DAPO's soft overlong punishment, added to `reward`.

A response of L tokens gets 0 while L <= max_len - buffer, then a penalty growing linearly
to -penalty_factor at L = max_len (and -penalty_factor beyond it):

    penalty(L) = penalty_factor * min(0, max(-1, (max_len - buffer - L) / buffer))

Per row, so it streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from omegaconf import MISSING

from operators.transform.reward_shaping import with_shaped_reward
from rldag import NodeContext, NodeKind, OperatorDef, Port, SpecError, check_positive, col, columns


def overlong_penalties(
    lengths: np.ndarray, max_len: int, buffer: int, penalty_factor: float = 1.0
) -> np.ndarray:
    """The (non-positive) reward shaping term per response length."""
    excess = (np.asarray(lengths, dtype=np.float64) - (max_len - buffer)) / buffer
    return -penalty_factor * np.clip(excess, 0.0, 1.0)


@dataclass
class OverlongPenaltyParams:
    """Parameters of `overlong_penalty`."""

    max_len: int = MISSING  # the response limit in tokens (the generate node's max_new_tokens)
    buffer: int = MISSING  # the last `buffer` tokens before max_len are penalised, linearly
    penalty_factor: float = 1.0  # the penalty at max_len

    def __post_init__(self) -> None:
        check_positive("max_len", self.max_len)
        check_positive("buffer", self.buffer)
        check_positive("penalty_factor", self.penalty_factor, allow_zero=True)
        if self.buffer > self.max_len:
            message = f"must be <= max_len ({self.max_len}), got {self.buffer}"
            raise SpecError(message, path="buffer")


class OverlongPenalty:
    """Adds the penalty of each response's length to `reward`; keeps it as `overlong_penalty`."""

    def __init__(self, params: OverlongPenaltyParams) -> None:
        self.p = params

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["scored"]
        lengths = pc.list_value_length(table["response_ids"]).to_numpy(zero_copy_only=False)
        penalty = overlong_penalties(lengths, self.p.max_len, self.p.buffer, self.p.penalty_factor)
        reward = table["reward"].to_numpy() + penalty
        return with_shaped_reward(table, reward, "overlong_penalty", penalty)


OVERLONG_PENALTY = OperatorDef(
    name="overlong_penalty",
    kind=NodeKind.transform,
    factory=OverlongPenalty,
    ports=(Port("scored", columns("reward", "response_ids")),),
    adds=(col("reward"), col("overlong_penalty", pa.float32())),
    params=OverlongPenaltyParams,
    streams=True,  # per row
    description="DAPO soft overlong punishment: linear penalty over the last `buffer` tokens.",
)
