"""A stored multi-turn episode seen turn by turn: in the terminal (`rldag inspect RUN --node N
--trajectory K`); rldag.report.rollouts renders it as Markdown for the sample-rollouts artifact.

Reads one row of a multi-turn generate table (the trajectory columns: ``messages`` — the whole
conversation, prompt included — ``turns``, ``turn_rewards``, ``tool_calls``, ``num_turns``,
``finish_reason``, ``env_errors``). The messages before the first assistant message are the
prompt; each assistant message opens turn k (0-based, as ``tool_calls.turn`` counts), and the
messages after it, up to the next assistant message, are the environment's answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

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


def _calls_table(calls: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="tool calls", title_justify="left", show_edge=False)
    for name in ("tool", "arguments", "error", "seconds"):
        table.add_column(name, overflow="fold")
    for call in calls:
        arguments = call.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        seconds = call.get("seconds")
        table.add_row(
            str(call.get("name", "?")),
            arguments,
            str(call.get("error") or ""),
            "" if seconds is None else f"{seconds:.3g}",
        )
    return table


def _text(text: str, style: str = "") -> Text:
    """Text that folds inside a panel (the CLI's console does not wrap long lines)."""
    return Text(text, style=style, overflow="fold", no_wrap=False)


def print_trajectory(console: Console, row: Mapping[str, Any], title: str) -> None:
    """One episode in the terminal: its summary, the prompt, then every turn as a panel with
    what the model said, its tool calls and the environment's answer; then its errors."""
    episode = trajectory(row)
    console.print(f"[bold]{title}[/bold]", highlight=False)
    console.print(summary(row), highlight=False)
    for message in episode.prompt:
        text = _text(str(message.get("content", "")))
        console.print(Panel(text, title=f"prompt · {speaker(message)}", title_align="left"))
    for turn in episode.turns:
        parts: list[Any] = [_text(str(turn.said.get("content", "")))]
        if turn.calls:
            parts.append(_calls_table(turn.calls))
        for message in turn.answer:
            parts.append(_text(f"{speaker(message)}: {message.get('content', '')}", "dim"))
        if turn.record.get("info"):
            parts.append(_text(f"info: {turn.record['info']}", "dim"))
        for error in turn.record.get("errors") or []:
            parts.append(_text(f"error: {error}", "red"))
        console.print(Panel(Group(*parts), title=turn_title(turn), title_align="left"))
    for error in row.get("env_errors") or []:
        console.print(f"[red]episode error:[/red] {error}", highlight=False)
