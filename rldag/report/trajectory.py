"""A stored multi-turn episode split turn by turn, for those that show it: the terminal
(rldag.console.trajectory, `rldag inspect RUN --node N --trajectory K`) and the Markdown of
the sample-rollouts artifact (rldag.report.rollouts).

Reads one row of a multi-turn generate table (the trajectory columns: ``messages`` — the whole
conversation, prompt included — ``turns``, ``turn_rewards``, ``tool_calls``, ``num_turns``,
``finish_reason``, ``env_errors``). The messages before the first assistant message are the
prompt; each assistant message opens turn k (0-based, as ``tool_calls.turn`` counts), and the
messages after it, up to the next assistant message, are the environment's answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TRAJECTORY_COLUMN = "messages"  # a table with it holds trajectories


@dataclass
class Turn:
    """One model turn: what it said, its tool calls, what the environment answered."""

    index: int
    said: Mapping[str, Any]  # the assistant message
    answer: list[Mapping[str, Any]] = field(default_factory=list)  # tool/user messages after it
    reward: float | None = None
    record: Mapping[str, Any] = field(default_factory=dict)  # the `turns` entry (spans, s)
    calls: list[Mapping[str, Any]] = field(default_factory=list)  # `tool_calls` of this turn


@dataclass
class Trajectory:
    """One episode of a stored table, split into its prompt and its turns."""

    prompt: list[Mapping[str, Any]]
    turns: list[Turn]
    row: Mapping[str, Any]


def _message_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Tool calls stored on the message itself (a JSON string), for tables without a
    ``tool_calls`` column."""
    raw = message.get("tool_calls") or ""
    try:
        calls = json.loads(raw) if isinstance(raw, str) and raw else raw or []
    except json.JSONDecodeError:
        return [{"name": "?", "arguments": raw}]
    return [c for c in calls if isinstance(c, Mapping)]


def trajectory(row: Mapping[str, Any]) -> Trajectory:
    """`row` (a dict of a multi-turn table's row) as its prompt and turns."""
    messages = list(row.get(TRAJECTORY_COLUMN) or [])
    firsts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    prompt = messages[: firsts[0]] if firsts else messages
    rewards = list(row.get("turn_rewards") or [])
    records = list(row.get("turns") or [])
    stored_calls = row.get("tool_calls")
    turns = []
    for k, start in enumerate(firsts):
        end = firsts[k + 1] if k + 1 < len(firsts) else len(messages)
        if stored_calls is None:
            calls = _message_calls(messages[start])
        else:
            calls = [c for c in stored_calls if c.get("turn") == k]
        turns.append(
            Turn(
                index=k,
                said=messages[start],
                answer=messages[start + 1 : end],
                reward=rewards[k] if k < len(rewards) else None,
                record=records[k] if k < len(records) else {},
                calls=calls,
            )
        )
    return Trajectory(prompt, turns, row)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def summary(row: Mapping[str, Any]) -> str:
    """One line: which episode, its reward, turns and how it ended."""
    keys = ("prompt_id", "sample_idx", "reward", "num_turns", "finish_reason", "policy_version")
    parts = [f"{k} {_number(row[k])}" for k in keys if row.get(k) is not None]
    for key in ("generate_seconds", "env_seconds"):
        if row.get(key) is not None:
            parts.append(f"{key} {row[key]:.3g}")
    return " · ".join(parts)


def speaker(message: Mapping[str, Any]) -> str:
    """``role`` and the tool's name when the message has one: ``tool (python)``."""
    name = message.get("name")
    return f"{message.get('role')} ({name})" if name else str(message.get("role"))


def turn_title(turn: Turn) -> str:
    """``turn k · reward r · m model tokens, e environment tokens · finish``."""
    title = f"turn {turn.index}"
    if turn.reward is not None:
        title += f" · reward {turn.reward:.4g}"
    record = turn.record
    if record.get("start") is not None and record.get("model_end") is not None:
        title += f" · {record['model_end'] - record['start']} model tokens"
        if record.get("end") is not None:
            title += f", {record['end'] - record['model_end']} environment tokens"
    if record.get("finish"):
        title += f" · {record['finish']}"
    return title
