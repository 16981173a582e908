"""Writes the task as veRL-format parquet files.

Columns (one row per problem):

* ``prompt``: the plain prompt string, e.g. ``"3+5="``, or with ``chat=True`` (the code task)
  one user message ``[{role: "user", content: ...}]``, as most veRL datasets store it;
* ``data_source``: ``"arithmetic"`` (selects :mod:`operators.score.rewards.arithmetic`);
* ``reward_model``: struct ``{ground_truth: string, style: "rule"}``;
* ``extra_info``: struct ``{split: string, index: int64}``.

Both splits hold all 100 problems in index order: the RL policy trains on the whole table and
the test split measures how much of it has been learned.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from examples.tiny_task.problems import DATA_SOURCE, Problem
from rldag.graph.schema import MESSAGES


def _schema(prompt: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("prompt", prompt),
            pa.field("data_source", pa.string()),
            pa.field(
                "reward_model",
                pa.struct([pa.field("ground_truth", pa.string()), pa.field("style", pa.string())]),
            ),
            pa.field(
                "extra_info",
                pa.struct([pa.field("split", pa.string()), pa.field("index", pa.int64())]),
            ),
        ]
    )


SCHEMA = _schema(pa.string())
CHAT_SCHEMA = _schema(MESSAGES)


def problems_table(
    problems: Sequence[Problem], split: str, data_source: str = DATA_SOURCE, chat: bool = False
) -> pa.Table:
    """The veRL-format table for ``problems`` (anything with ``prompt``, ``ground_truth``
    and ``index``), tagged with ``split``; ``chat``: prompts as one user message."""
    rows = [
        {
            "prompt": [{"role": "user", "content": p.prompt}] if chat else p.prompt,
            "data_source": data_source,
            "reward_model": {"ground_truth": p.ground_truth, "style": "rule"},
            "extra_info": {"split": split, "index": p.index},
        }
        for p in problems
    ]
    return pa.Table.from_pylist(rows, schema=CHAT_SCHEMA if chat else SCHEMA)


def write_split(
    path: Path,
    problems: Sequence[Problem],
    split: str,
    data_source: str = DATA_SOURCE,
    chat: bool = False,
) -> None:
    """Writes ``problems`` as one veRL parquet file at ``path``."""
    pq.write_table(problems_table(problems, split, data_source, chat), path)
