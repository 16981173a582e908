"""A stored multi-turn episode in the terminal, turn by turn (`rldag inspect RUN --node N
--trajectory K`), from the turns rldag.report.trajectory splits it into."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rldag.report.trajectory import speaker, summary, trajectory, turn_title


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
