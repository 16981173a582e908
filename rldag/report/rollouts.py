"""A few sample rollouts of an iteration, and Markdown that shows them (multi-turn episodes
turn by turn).

Plain functions over Arrow tables; the flows publish the Markdown as Prefect artifacts and
the trackers log the rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pyarrow as pa

from rldag.graph.dag import Graph
from rldag.report.trajectory import TRAJECTORY_COLUMN, speaker, summary, trajectory, turn_title

MAX_CHARS = 600  # a rollout's prompt or response is cut to this in Markdown
TRAJECTORY_EXTRAS = (
    "turns",
    "turn_rewards",
    "tool_calls",
    "num_turns",
    "finish_reason",
    "env_errors",
)


def _rollout_table(graph: Graph, tables: Mapping[str, pa.Table]) -> pa.Table | None:
    """The first table in graph order that has prompts, responses and rewards."""
    for name in graph.order:
        table = tables.get(name)
        if table is not None and {"prompt", "response", "reward"} <= set(table.column_names):
            return table
    return None


def sample_rollouts(
    graph: Graph, tables: Mapping[str, pa.Table], k: int = 4
) -> list[dict[str, object]]:
    """Up to `k` rows (prompt, response, reward, ...) spread evenly over the scored table."""
    table = _rollout_table(graph, tables)
    if table is None or table.num_rows == 0:
        return []
    step = max(1, table.num_rows // k)
    keep = ["prompt_id", "sample_idx", "prompt", "response", "reward", "ground_truth"]
    keep += [TRAJECTORY_COLUMN, *TRAJECTORY_EXTRAS]  # multi-turn tables: whole episodes
    keep = [c for c in keep if c in table.column_names]
    return table.select(keep).take(list(range(0, table.num_rows, step))[:k]).to_pylist()


def _text(value: object) -> str:
    if isinstance(value, list):  # chat messages: [{"role": ..., "content": ...}, ...]
        value = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in value)
    elif not isinstance(value, str):
        value = json.dumps(value)
    return value if len(value) <= MAX_CHARS else value[:MAX_CHARS] + " …"


def _block(text: str) -> str:
    fence = "~~~" if "```" in text else "```"
    return f"{fence}\n{text}\n{fence}"


def rollouts_markdown(rows: Sequence[Mapping[str, object]], iteration: int) -> str:
    """Markdown with one section per sample rollout: prompt and response as code blocks."""
    lines = [f"# Sample rollouts, iteration {iteration}", ""]
    if not rows:
        lines.append("No table of this iteration has prompt, response and reward columns.")
    for row in rows:
        head = f"prompt {row.get('prompt_id', '?')}"
        if "sample_idx" in row:
            head += f", sample {row['sample_idx']}"
        truth = f" · ground truth `{row['ground_truth']}`" if row.get("ground_truth") else ""
        lines += [f"### {head} · reward **{row['reward']:.3g}**{truth}", ""]
        if row.get(TRAJECTORY_COLUMN):
            lines += trajectory_markdown(row)
            continue
        lines += ["prompt", "", _block(_text(row["prompt"])), ""]
        lines += ["response", "", _block(_text(row["response"])), ""]
    return "\n".join(lines)


def trajectory_markdown(row: Mapping[str, object]) -> list[str]:
    """Markdown lines of one multi-turn episode, turn by turn: the prompt, what the model
    said, its tool calls and what the environment answered."""
    episode = trajectory(row)
    lines = [summary(row), ""]
    for message in episode.prompt:
        lines += [f"**prompt · {speaker(message)}**", "", _block(_text(message["content"])), ""]
    for turn in episode.turns:
        lines += [f"**{turn_title(turn)}**", "", _block(_text(turn.said["content"])), ""]
        for call in turn.calls:
            error = f" — error: {call['error']}" if call.get("error") else ""
            lines.append(f"- tool call `{call.get('name')}` `{call.get('arguments')}`{error}")
        lines += [""] if turn.calls else []
        if turn.record.get("info"):
            lines += [f"- info `{turn.record['info']}`", ""]
        for message in turn.answer:
            lines += [f"*{speaker(message)}*", "", _block(_text(message["content"])), ""]
    lines += [f"- episode error: {error}" for error in row.get("env_errors") or []]
    return lines
