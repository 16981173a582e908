"""Advantage transforms: `advantage` (any registered estimator by name) and `grpo_advantage`
(GRPO / Dr.GRPO, the default pipeline's; adds only the per-sequence column).

`advantage` adds `advantage` (float32 per sequence) and `token_advantage` (list<float32>,
aligned with `response_ids`, 0 on environment tokens): sequence estimators broadcast their
value over the model's tokens, token-level ones (REINFORCE++) fill it per token and put the
mean over the model's tokens in `advantage`. The trainer trains on `token_advantage` when it
is there. `remax` reads its baseline (a greedy rollout's rewards) from the `baseline` port;
`gae` reads a critic's per-token `values` column. Per-group estimators run on each streamed
chunk; batch-wide ones (whitening) wait for the whole table (`Scope`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from operators.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    MissingInputError,
    Scope,
    grpo_advantages,
    scope_of,
)
from operators.train.batch import aligned, padded
from rldag import (
    InputError,
    NodeContext,
    NodeKind,
    OperatorDef,
    Port,
    SpecError,
    check_positive,
    col,
    columns,
)

__all__ = ["ADVANTAGE", "GRPO_ADVANTAGE", "grpo_advantages"]
TOKEN_ADVANTAGE = col("token_advantage", pa.list_(pa.float32()))


@dataclass
class AdvantageParams:
    """Parameters of `grpo_advantage`."""

    norm_by_std: bool = True  # false: Dr.GRPO (mean-centred only)
    eps: float = 1e-6  # added to the group std


class GroupAdvantage:
    """Adds `advantage` to a scored rollout table, grouped by `prompt_id`."""

    def __init__(self, params: AdvantageParams) -> None:
        self.config = AdvantageConfig(norm_by_std=params.norm_by_std, eps=params.eps)

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["scored"]
        rows = AdvantageInputs(table["reward"].to_numpy(), table["prompt_id"].to_numpy())
        adv = ADVANTAGE_ESTIMATORS.get("grpo")(rows, self.config)
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


@dataclass
class EstimatorParams:
    """Parameters of `advantage`."""

    # grpo | dr_grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax |
    # module:function (operators.algorithms.advantages)
    estimator: str = "grpo"
    norm_by_std: bool = True  # grpo: divide by the group std
    eps: float = 1e-6  # added to every std it divides by
    gamma: float = 1.0  # reinforce_plus_plus, gae: discount per model token
    lam: float = 1.0  # gae: lambda

    def __post_init__(self) -> None:
        ADVANTAGE_ESTIMATORS.check("estimator", self.estimator)
        check_positive("eps", self.eps, allow_zero=True)
        for key in ("gamma", "lam"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise SpecError(f"must be in [0, 1], got {getattr(self, key)!r}", path=key)


def _baseline(table: pa.Table, baseline: pa.Table | None, node: str) -> np.ndarray | None:
    """Each row's baseline: the mean reward of the baseline table's rows of its prompt."""
    if baseline is None:
        return None
    ids, inverse = np.unique(baseline["prompt_id"].to_numpy(), return_inverse=True)
    means = np.bincount(inverse, weights=baseline["reward"].to_numpy()) / np.bincount(inverse)
    wanted = table["prompt_id"].to_numpy()
    at = np.clip(np.searchsorted(ids, wanted), 0, max(len(ids) - 1, 0))
    missing = np.flatnonzero((ids[at] != wanted) if len(ids) else np.ones(len(wanted), bool))
    if len(missing):
        raise InputError(
            f"no baseline row for prompt_id {int(wanted[missing[0]])}",
            path=f"nodes.{node}.inputs.baseline",
        )
    return means[at]


def waits_for(params: EstimatorParams) -> str:
    """Why an `advantage` node waits for its whole table: its estimator is batch-wide."""
    if scope_of(ADVANTAGE_ESTIMATORS.get(params.estimator)) == Scope.group:
        return ""
    return f"estimator {params.estimator} normalises over the whole batch"


class Advantage:
    """Adds `advantage` and `token_advantage` with the estimator named in the params."""

    def __init__(self, params: EstimatorParams) -> None:
        self.estimator = ADVANTAGE_ESTIMATORS.get(params.estimator)
        self.name = params.estimator
        self.config = AdvantageConfig(params.norm_by_std, params.eps, params.gamma, params.lam)

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["scored"]
        responses, lens = padded(table["response_ids"], 0, np.int64)
        width = responses.shape[1]
        mask = (np.arange(width)[None, :] < lens[:, None]).astype(np.float64)
        response_mask = aligned(table, "response_mask", lens, width)
        if response_mask is not None:
            mask = mask * response_mask
        rows = AdvantageInputs(
            table["reward"].to_numpy(),
            table["prompt_id"].to_numpy(),
            mask,
            _baseline(table, inputs.get("baseline"), ctx.node),
            aligned(table, "values", lens, width),
        )
        try:
            adv = np.asarray(self.estimator(rows, self.config), dtype=np.float32)
        except MissingInputError as err:
            raise InputError(f"estimator {self.name}: {err}", path=f"nodes.{ctx.node}") from None
        if adv.ndim == 1:
            per_token = adv[:, None] * mask
        else:
            per_token = adv * mask
            adv = (per_token.sum(-1) / np.maximum(mask.sum(-1), 1.0)).astype(np.float32)
        flat = per_token.astype(np.float32)[np.arange(width)[None, :] < lens[:, None]]
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        token_adv = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.float32()))
        table = table.append_column("advantage", pa.array(adv, pa.float32()))
        return table.append_column(TOKEN_ADVANTAGE.name, token_adv)


ADVANTAGE = OperatorDef(
    name="advantage",
    kind=NodeKind.transform,
    factory=Advantage,
    ports=(
        Port("scored", columns("prompt_id", "reward", "response_ids")),
        Port("baseline", columns("prompt_id", "reward"), optional=True),
    ),
    adds=(col("advantage"), TOKEN_ADVANTAGE),
    params=EstimatorParams,
    streams=True,  # per chunk of whole prompt groups, unless the estimator is batch-wide
    waits_for=waits_for,
    description="Advantages by estimator name (grpo, rloo, reinforce_plus_plus, remax, ...).",
)
