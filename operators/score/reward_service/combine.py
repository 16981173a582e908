"""`combine` transform: several score nodes' rewards into one (composed rewards).

The node's `rollouts` port is the table to reward (usually the generate node); every other
input port is a component, named by its port, fed by a score node. Rows are matched by
`prompt_id` and `sample_idx` (when there is one), so a component may run on another pool
or drop rows (a row a component dropped is dropped here too). Each component's reward is kept as
`reward_<name>` (reported as the metric `reward/<name>`) and `reward` becomes:

- `weighted_sum`: sum of weight × component reward (a weight defaults to 1);
- `product`: the product of the components' rewards;
- `gate`: the weighted sum of the other components where the `gate` component's reward is
  >= `threshold` (its own reward when it is the only component), else `fail_reward`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import pyarrow as pa

from rldag import InputError, NodeContext, NodeKind, OperatorDef, Port, col, columns

KEYS = ("prompt_id", "sample_idx")
PRIMARY = "rollouts"
RESERVED = ("mean", "std")  # reward/mean and reward/std are the combined reward's metrics


class CombineMode(StrEnum):
    """How component rewards combine."""

    weighted_sum = "weighted_sum"
    product = "product"
    gate = "gate"


@dataclass
class CombineParams:
    """Parameters of the `combine` transform."""

    mode: CombineMode = CombineMode.weighted_sum
    weights: dict[str, float] = field(default_factory=dict)  # component -> weight (default 1)
    gate: str = ""  # gate: the pass/fail component
    threshold: float = 0.5  # gate: a row passes when the gate's reward >= threshold
    fail_reward: float = 0.0  # gate: the reward of a row that does not pass


def check_components(params: CombineParams, inputs: Mapping[str, pa.Schema]) -> None:
    """Weights and the gate must name components; a gate needs `mode: gate`, a product no
    weights; at least one component."""
    names = [p for p in inputs if p != PRIMARY]
    if not names:
        raise InputError("no components: connect score nodes as more inputs", path="mode")
    for name in names:
        if name in RESERVED:
            raise InputError(
                f"a component may not be named '{name}' (its metric would be reward/{name})",
                path="mode",
            )
    for key in params.weights:
        if key not in names:
            raise InputError(
                f"'{key}' is not a component (components: {', '.join(names)})",
                path=f"weights.{key}",
            )
    if params.mode == CombineMode.product and params.weights:
        raise InputError("a product takes no weights", path="weights")
    if params.mode == CombineMode.gate and params.gate not in names:
        raise InputError(
            f"mode gate needs the gate component (components: {', '.join(names)})", path="gate"
        )
    if params.gate and params.mode != CombineMode.gate:
        raise InputError(f"a gate needs mode: gate (mode is {params.mode})", path="gate")


def component_columns(params: CombineParams, inputs: Mapping[str, pa.Schema]) -> tuple:
    """`reward_<name>` per component, in port order (before `reward`)."""
    return tuple(col(f"reward_{p}", pa.float32()) for p in inputs if p != PRIMARY)


def combined(rewards: Mapping[str, np.ndarray], params: CombineParams) -> np.ndarray:
    """The combined reward of each row from the components' rewards (pure)."""
    names = list(rewards)
    if params.mode == CombineMode.product:
        return np.prod([rewards[n] for n in names], axis=0)
    others = [n for n in names if n != params.gate] if params.mode == CombineMode.gate else names
    zero = np.zeros(len(next(iter(rewards.values()))))
    total = sum((params.weights.get(n, 1.0) * rewards[n] for n in others), zero)
    if params.mode == CombineMode.gate:
        gate = rewards[params.gate]
        value = total if others else gate
        return np.where(gate >= params.threshold, value, params.fail_reward)
    return total


def _keyed(table: pa.Table, keys: list[str]) -> dict[tuple, int]:
    values = zip(*(table[k].to_pylist() for k in keys), strict=True)
    return {key: i for i, key in enumerate(values)}


class Combine:
    """Joins the components' rewards onto the rows and combines them."""

    def __init__(self, params: CombineParams) -> None:
        self.p = params

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs[PRIMARY]
        components = {p: t for p, t in inputs.items() if p != PRIMARY}
        keys = [k for k in KEYS if k in table.column_names]
        rows = list(_keyed(table, keys))
        found = {p: _keyed(t, keys) for p, t in components.items()}
        kept = [i for i, key in enumerate(rows) if all(key in f for f in found.values())]
        if len(kept) < len(rows):
            ctx.log.info(
                "combine: %d of %d rows lack a component's reward", len(rows) - len(kept), len(rows)
            )
            table = table.take(kept)
        rewards = {}
        for name, t in components.items():
            index = [found[name][rows[i]] for i in kept]
            rewards[name] = t["reward"].to_numpy().astype(np.float64)[index]
        out = table.drop_columns([c for c in ("reward",) if c in table.column_names])
        for name, values in rewards.items():
            out = out.append_column(f"reward_{name}", pa.array(values, pa.float32()))
        return out.append_column("reward", pa.array(combined(rewards, self.p), pa.float32()))


COMBINE = OperatorDef(
    name="combine",
    kind=NodeKind.transform,
    factory=Combine,
    ports=(Port(PRIMARY, columns("prompt_id")),),
    named_ports=Port("component", columns("prompt_id", "reward")),
    adds=(col("reward"),),
    params=CombineParams,
    check_input=check_components,
    adds_from_inputs=component_columns,
    max_workers=1,
    description="Composed rewards: weighted sum, product or gate of several score nodes.",
)
