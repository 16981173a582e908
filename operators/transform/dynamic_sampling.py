"""`dynamic_sampling` transform: DAPO's dynamic sampling (veRL's `filter_groups`).

A prompt group (the rows sharing `prompt_id`) whose metric is the same for every sample has
zero variance, so GRPO gives it no signal; the filter drops it. It keeps the first
`train_groups` informative groups in prompt order and drops the surplus. When fewer exist
it tells the engine how many it lacks, and the engine runs a refill round (up to
`max_rounds` in all: rldag.engine.refill) on fresh prompts and calls it again on the rows
of every round; after the last round it keeps what it has and reports the shortfall.
Counts per iteration go to the metrics (`dapo/...`).

It needs the whole batch (the first N in prompt order is only known once every group has
arrived), so it does not stream; it carries no state across iterations and only removes
rows, so it works the same for every `async.max_staleness`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rldag import (
    InputError,
    NodeContext,
    NodeKind,
    OperatorDef,
    Port,
    check_positive,
    columns,
    with_reported_metrics,
    with_shortfall,
)


@dataclass(frozen=True)
class GroupSelection:
    """Which rows a filter keeps, and the group counts behind it."""

    keep: np.ndarray  # bool per row
    groups: int  # groups in the input
    kept: int
    zero_variance: int  # dropped: every sample has the same metric
    surplus: int  # informative, dropped beyond `train_groups`
    short: int  # `train_groups` minus kept, when positive

    def counts(self) -> dict[str, float]:
        """The metrics row entries of this selection."""
        return {
            "dapo/groups": self.groups,
            "dapo/kept_groups": self.kept,
            "dapo/dropped_groups": self.zero_variance,
            "dapo/surplus_groups": self.surplus,
            "dapo/short_groups": self.short,
        }


def select_groups(metric: np.ndarray, group_ids: np.ndarray, train_groups: int) -> GroupSelection:
    """Keep the rows of the first `train_groups` groups (ascending group id; 0 = no limit)
    whose metric is not the same for all their samples."""
    ids, inverse = np.unique(group_ids, return_inverse=True)
    low = np.full(len(ids), np.inf)
    high = np.full(len(ids), -np.inf)
    np.minimum.at(low, inverse, metric)
    np.maximum.at(high, inverse, metric)
    informative = high > low
    kept = informative & (np.cumsum(informative) <= (train_groups or len(ids)))
    n_kept, n_informative = int(kept.sum()), int(informative.sum())
    return GroupSelection(
        keep=kept[inverse],
        groups=len(ids),
        kept=n_kept,
        zero_variance=len(ids) - n_informative,
        surplus=n_informative - n_kept,
        short=max(0, train_groups - n_kept),
    )


@dataclass
class DynamicSamplingParams:
    """Parameters of `dynamic_sampling`."""

    metric: str = "reward"  # numeric column whose spread within a group is the signal
    train_groups: int = 0  # groups to keep (first informative in prompt order); 0 = all
    # rounds of fresh prompts an iteration may generate to fill train_groups (1: no refill;
    # veRL's max_num_gen_batches in the DAPO recipe)
    max_rounds: int = 10

    def __post_init__(self) -> None:
        check_positive("train_groups", self.train_groups, allow_zero=True)
        check_positive("max_rounds", self.max_rounds)


def metric_values(table: pa.Table, metric: str, node: str) -> np.ndarray:
    """The metric column as float64; a missing or non-numeric column, a null, NaN or
    infinite value is bad input."""
    path = f"nodes.{node}.params.metric"
    if metric not in table.column_names:
        have = ", ".join(table.column_names)
        raise InputError(f"column '{metric}' is missing; upstream has: {have}", path=path)
    column = table[metric]
    if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        raise InputError(f"column '{metric}' is {column.type}, expected a number", path=path)
    if column.null_count:
        row = pc.index(pc.is_null(column), True).as_py()
        raise InputError(f"column '{metric}' is null at row {row}", path=path)
    values = column.to_numpy().astype(np.float64)
    if not np.isfinite(values).all():
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise InputError(f"column '{metric}' is {values[row]} at row {row}", path=path)
    return values


class DynamicSampling:
    """Drops zero-variance prompt groups, keeps at most `train_groups` informative ones."""

    def __init__(self, params: DynamicSamplingParams) -> None:
        self.p = params

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["scored"]
        metric = metric_values(table, self.p.metric, ctx.node)
        selection = select_groups(metric, table["prompt_id"].to_numpy(), self.p.train_groups)
        last_round = ctx.round + 1 >= self.p.max_rounds
        if selection.kept == 0 and last_round:
            rounds = f" ({ctx.round + 1} rounds)" if ctx.round else ""
            raise ValueError(
                f"no prompt group of the {selection.groups}{rounds} in iteration "
                f"{ctx.iteration} has two different '{self.p.metric}' values: nothing to train "
                "on; raise max_rounds, the source's oversample or the generate node's n"
            )
        kept = table.filter(pa.array(selection.keep))
        kept = with_reported_metrics(kept, ctx.node, selection.counts())
        if not last_round:
            return with_shortfall(kept, ctx.node, selection.short or int(selection.kept == 0))
        if selection.short:
            ctx.log.info(
                "%s: iteration %d has %d informative prompt groups, %d short of train_groups=%d",
                ctx.node,
                ctx.iteration,
                selection.kept,
                selection.short,
                self.p.train_groups,
            )
        return kept


DYNAMIC_SAMPLING = OperatorDef(
    name="dynamic_sampling",
    kind=NodeKind.transform,
    factory=DynamicSampling,
    ports=(Port("scored", columns("prompt_id")),),
    params=DynamicSamplingParams,
    max_workers=1,  # picks the first N groups of the whole batch
    refill_rounds="max_rounds",
    description="DAPO dynamic sampling: drop zero-variance groups, keep the first N informative, "
    "refilling with fresh prompts up to max_rounds.",
)
