"""Score nodes from veRL-style reward functions.

A reward function has veRL's signature ``compute_score(data_source, solution_str,
ground_truth, extra_info) -> float | dict`` (a dict must hold ``score``; the rest is kept as
``reward_info`` JSON). Any such function becomes a score operator, by registered name or
as ``module:function`` in pipeline.yaml.

User code fails: each call runs in a forked worker bounded by `timeout_s` (operators/
reward_worker.py), and a row whose call raised, hung, or returned something that is not a
finite number is handled by `on_error`. Every row carries `reward_error` (empty when its
call was fine), so metrics can count the failures.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from operators.score.reward_call import RewardArgs, RewardFn, RewardOutcome, call_rewards
from operators.score.reward_signature import check_reward_signature, reads_ground_truth
from operators.score.reward_worker import ForkedRewardCalls
from rldag import InputError, NodeContext, NodeKind, OperatorDef, Port, RowError, check_positive
from rldag.graph.schema import col, columns, no_values_reason

ARGUMENTS = ("data_source", "response", "ground_truth", "extra_info")  # in call order


class OnError(StrEnum):
    """What a score node does with a row whose reward call failed."""

    fail = "fail"  # the run fails, naming the node, iteration, row, function and error
    zero = "zero"  # the row's reward is 0.0 (its `reward_error` says why)
    drop = "drop"  # the row is removed; the rest of its prompt group stays


@dataclass
class ScoreParams:
    """Parameters of a score node around a reward function."""

    on_error: OnError = OnError.fail  # fail | zero | drop
    timeout_s: float = 60.0  # per call, in a forked worker; 0: in this process, no timeout

    def __post_init__(self) -> None:
        check_positive("timeout_s", self.timeout_s, allow_zero=True)


def _row_name(table: pa.Table, index: int) -> str:
    ids = [
        f"{c} {table[c][index].as_py()}"
        for c in ("prompt_id", "sample_idx")
        if c in table.column_names
    ]
    return f"row {index}" + (f" ({', '.join(ids)})" if ids else "")


def _failed(ctx: NodeContext, where: str, scorer: str, what: str) -> RowError:
    return RowError(
        f"node '{ctx.node}' iteration {ctx.iteration}, {where}: {scorer} {what}; fix it (if "
        f"only some rows can fail, nodes.{ctx.node}.params.on_error: zero or drop keeps going)"
    )


def scored_table(
    table: pa.Table,
    outcomes: Iterable[RewardOutcome],
    on_error: OnError,
    ctx: NodeContext,
    scorer: str,
) -> pa.Table:
    """`table` with `reward`, `reward_info` and `reward_error` from one outcome per row (in
    order), `on_error` applied to the rows whose outcome is an error. `scorer` names what
    scored them in errors and logs (``reward function my:fn``, ``reward model PATH``)."""
    scored: list[RewardOutcome] = []
    for outcome in outcomes:
        if outcome.error and on_error == OnError.fail:
            if isinstance(outcomes, Generator):
                outcomes.close()  # stops a worker still busy with later rows
            raise _failed(ctx, _row_name(table, len(scored)), scorer, outcome.error)
        scored.append(outcome)
    errors = pa.array([o.error for o in scored], pa.string())
    out = table
    for name, values in (
        ("reward", pa.array([o.score for o in scored], pa.float32())),
        ("reward_info", pa.array([o.info for o in scored], pa.string())),
        ("reward_error", errors),
    ):  # an upstream reward (an agent's environment reward) is replaced
        at = out.schema.get_field_index(name)
        out = out.set_column(at, name, values) if at >= 0 else out.append_column(name, values)
    failed = [i for i, o in enumerate(scored) if o.error]
    if not failed:
        return out
    first = f"{_row_name(table, failed[0])}: {scored[failed[0]].error}"
    if on_error == OnError.drop:
        if len(failed) == len(scored):
            raise RowError(
                f"node '{ctx.node}' iteration {ctx.iteration}: {scorer} failed on all "
                f"{len(scored)} rows, none is left (first: {first})"
            )
        out = out.filter(pc.equal(errors, ""))
    ctx.log.warning(
        "%s failed on %d of %d rows (on_error: %s); first: %s",
        scorer,
        len(failed),
        len(scored),
        on_error.value,
        first,
    )
    return out


class RewardScorer:
    """Calls the reward function on every row; adds `reward`, `reward_info`, `reward_error`."""

    def __init__(self, name: str, fn: RewardFn, params: ScoreParams) -> None:
        self.name = name
        self.on_error = params.on_error
        self.worker = ForkedRewardCalls(fn, params.timeout_s) if params.timeout_s > 0 else None
        calls = self.worker or partial(call_rewards, fn)
        self.calls: Callable[[list[RewardArgs]], Iterator[RewardOutcome]] = calls

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        rows = list(zip(*(table[c].to_pylist() for c in ARGUMENTS), strict=True))
        return scored_table(
            table, self.calls(rows), self.on_error, ctx, f"reward function {self.name}"
        )

    def close(self) -> None:
        """Stop the reward worker."""
        if self.worker is not None:
            self.worker.close()


def _needs_ground_truth(name: str, fn: RewardFn) -> Callable[[ScoreParams, Mapping], None]:
    """The validation check that a reward function reading `ground_truth` gets one."""

    def check(_params: ScoreParams, inputs: Mapping[str, pa.Schema]) -> None:
        reason = no_values_reason(inputs["rollouts"], "ground_truth")
        if reason is not None and reads_ground_truth(fn):
            raise InputError(
                f"reward function {name} reads ground_truth, but its input has none: {reason}",
                path="inputs.rollouts",
            )

    return check


def score_operator(name: str, fn: RewardFn) -> OperatorDef:
    """A score OperatorDef around a veRL-style reward function (its signature checked)."""
    check_reward_signature(name, fn)
    return OperatorDef(
        name=name,
        kind=NodeKind.score,
        factory=lambda params: RewardScorer(name, fn, params),
        ports=(Port("rollouts", columns("response", "data_source", "ground_truth", "extra_info")),),
        adds=(col("reward"), col("reward_info"), col("reward_error", pa.string())),
        params=ScoreParams,
        streams=True,
        check_input=_needs_ground_truth(name, fn),
        description=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else name,
    )
