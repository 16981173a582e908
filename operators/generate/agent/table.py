"""Episodes -> the rollout table: the generate columns plus the trajectory columns."""

from __future__ import annotations

import pyarrow as pa

from operators.generate.agent.episode import Episode
from operators.generate.single_turn import rollout_table
from rldag import Column, col

_S, _I32, _F32 = pa.string(), pa.int32(), pa.float32()
MESSAGE = pa.struct([("role", _S), ("content", _S), ("name", _S), ("tool_calls", _S)])
TURN = pa.struct(
    [
        ("start", _I32),  # response position of the turn's first model token
        ("model_end", _I32),  # end of its model tokens; environment tokens up to `end`
        ("end", _I32),
        ("generate_seconds", _F32),
        ("env_seconds", _F32),
        ("reward", _F32),
        ("policy_version", pa.int64()),
        ("finish", _S),  # the engine's finish reason for the turn
        ("errors", pa.list_(_S)),
        ("info", _S),  # the environment's StepResult.info as JSON ("" when empty)
    ]
)
TOOL_CALL = pa.struct(
    [("turn", _I32), ("name", _S), ("arguments", _S), ("error", _S), ("seconds", _F32)]
)

# The columns `agent_loop` adds to the generate columns (DESIGN.md "multi-turn generate").
AGENT_COLUMNS: dict[str, pa.DataType] = {
    "response_mask": col("response_mask").type,  # 1 model token, 0 environment token
    "messages": pa.list_(MESSAGE),  # the whole conversation, prompt included
    "num_turns": col("num_turns").type,
    "turn_rewards": col("turn_rewards").type,
    "reward": col(
        "reward"
    ).type,  # the sum of turn_rewards (a score node downstream may replace it)
    "turns": pa.list_(TURN),
    "tool_calls": pa.list_(TOOL_CALL),
    "tool_names": pa.list_(_S),
    "env_errors": pa.list_(_S),
    "env_seconds": _F32,
    "generate_seconds": _F32,
}


def agent_columns() -> tuple[Column, ...]:
    return tuple(Column(name, (t,)) for name, t in AGENT_COLUMNS.items())


def _values(e: Episode) -> dict[str, object]:
    return {
        "response_mask": e.mask,
        "messages": e.messages,
        "num_turns": len(e.turns),
        "turn_rewards": [t.reward for t in e.turns],
        "reward": sum(t.reward for t in e.turns),
        "turns": [vars(t) for t in e.turns],
        "tool_calls": [
            {
                "turn": k,
                "name": c.name,
                "arguments": c.arguments,
                "error": c.error,
                "seconds": c.seconds,
            }
            for k, c in e.calls
        ],  # fmt: skip
        "tool_names": [c.name for _, c in e.calls],
        "env_errors": e.errors,
        "env_seconds": sum(t.env_seconds for t in e.turns),
        "generate_seconds": sum(t.generate_seconds for t in e.turns),
    }


def agent_table(prompts: pa.Table, groups: list[list[Episode]], version: int) -> pa.Table:
    """``prompts`` with a row per episode (grouped by prompt, in order) and every column."""
    table = rollout_table(
        prompts, [g[0].prompt_ids for g in groups], groups, [version] * len(groups)
    )
    episodes = [e for g in groups for e in g]
    per_row = pa.array([e.prompt_ids for e in episodes], pa.list_(pa.int32()))
    table = table.set_column(table.schema.get_field_index("prompt_ids"), "prompt_ids", per_row)
    if "policy_version_max" not in table.column_names:
        table = table.append_column("policy_version_max", table["policy_version"])
    rows = [_values(e) for e in episodes]
    for name, kind in AGENT_COLUMNS.items():
        values = pa.array([r[name] for r in rows], kind)
        at = table.schema.get_field_index(name)
        table = table.set_column(at, name, values) if at >= 0 else table.append_column(name, values)
    return table
