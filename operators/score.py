"""Score nodes from veRL-style reward functions.

A reward function has veRL's signature ``compute_score(data_source, solution_str,
ground_truth, extra_info) -> float | dict`` (a dict must hold ``score``; the rest is kept as
``reward_info`` JSON). Any such function becomes a score operator, by registered name or
as ``module:function`` in pipeline.yaml.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from rldag.operator import NodeContext, OperatorDef, Port
from rldag.schema import col, columns
from rldag.spec import NodeKind

RewardFn = Callable[..., float | dict[str, Any]]


def _one(fn: RewardFn, row: dict[str, Any]) -> tuple[float, str | None]:
    extra = json.loads(row["extra_info"]) if row.get("extra_info") else {}
    value = fn(row["data_source"], row["response"], row["ground_truth"], extra)
    if isinstance(value, dict):
        if "score" not in value:
            raise ValueError(f"reward function returned a dict without 'score': {value!r}")
        return float(value["score"]), json.dumps(value, default=str)
    return float(value), None


class RewardScorer:
    """Calls the reward function on every row and adds `reward` and `reward_info`."""

    def __init__(self, fn: RewardFn) -> None:
        self.fn = fn

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        needed = table.select(["data_source", "response", "ground_truth", "extra_info"])
        scored = [_one(self.fn, row) for row in needed.to_pylist()]
        rewards = pa.array([s for s, _ in scored], pa.float32())
        infos = pa.array([i for _, i in scored], pa.string())
        return table.append_column("reward", rewards).append_column("reward_info", infos)


def score_operator(name: str, fn: RewardFn) -> OperatorDef:
    """A score OperatorDef around a veRL-style reward function."""
    return OperatorDef(
        name=name,
        kind=NodeKind.score,
        factory=lambda _params: RewardScorer(fn),
        ports=(Port("rollouts", columns("response", "data_source", "ground_truth", "extra_info")),),
        adds=(col("reward"), col("reward_info")),
        streams=True,
        description=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else name,
    )
