"""What a run shows a person besides its tables: the reward curve as a PNG (matplotlib, Agg,
no display needed), Markdown that embeds it, and a few sample rollouts as Markdown.

Plain functions over metrics rows and Arrow tables; the flows publish the results as Prefect
artifacts and the run's storage keeps the PNG.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping, Sequence

import pyarrow as pa
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rldag.graph.dag import Graph
from rldag.report.trajectory import TRAJECTORY_COLUMN, speaker, summary, trajectory, turn_title

MAX_CHARS = 600  # a rollout's prompt or response is cut to this in Markdown
REWARD_CURVE = "reward_curve.png"  # stored as <run_id>/reward_curve.png
TRAJECTORY_EXTRAS = (
    "turns",
    "turn_rewards",
    "tool_calls",
    "num_turns",
    "finish_reason",
    "env_errors",
)


def reward_curve_png(metrics: Sequence[Mapping[str, float]], title: str) -> bytes:
    """A PNG of `reward/mean` (± `reward/std`) over iterations, from metrics rows."""
    rows = [m for m in metrics if not math.isnan(m.get("reward/mean", math.nan))]
    xs = [int(m["iteration"]) for m in rows]
    mean = [m["reward/mean"] for m in rows]
    std = [m.get("reward/std", 0.0) for m in rows]
    fig = Figure(figsize=(7, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(xs, mean, marker="o", markersize=3, linewidth=1.5, label="reward/mean")
    ax.fill_between(
        xs, [m - s for m, s in zip(mean, std, strict=True)],
        [m + s for m, s in zip(mean, std, strict=True)], alpha=0.2, label="± reward/std",
    )  # fmt: skip
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if rows:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """Markdown showing `png` inline as a data: URI (the Prefect UI renders it as is)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


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
