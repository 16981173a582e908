"""Writes the code task as veRL-format parquet files (the addition task's schema).

Columns (one row per problem):

* ``prompt``: the plain prompt string, e.g. ``"Write a Python function add(a, b) that ..."``;
* ``data_source``: ``"code"``;
* ``reward_model``: struct ``{ground_truth: <assert source>, style: "rule"}``; the dataset
  source turns it into the ``ground_truth`` column that ``sandbox.python`` reads its tests from;
* ``extra_info``: struct ``{split: string, index: int64}``.

Both splits hold all problems in index order, as in the addition task.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from operators.tiny_task.coding.problems import DATA_SOURCE, CodeProblem
from operators.tiny_task.dataset import SCHEMA


def code_problems_table(problems: Sequence[CodeProblem], split: str) -> pa.Table:
    """The veRL-format table for ``problems``, tagged with ``split``."""
    rows = [
        {
            "prompt": p.prompt,
            "data_source": DATA_SOURCE,
            "reward_model": {"ground_truth": p.ground_truth, "style": "rule"},
            "extra_info": {"split": split, "index": p.index},
        }
        for p in problems
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_code_split(path: Path, problems: Sequence[CodeProblem], split: str) -> None:
    """Writes ``problems`` as one veRL parquet file at ``path``."""
    pq.write_table(code_problems_table(problems, split), path)
