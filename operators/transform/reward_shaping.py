"""Reward shaping transforms' common step: a new `reward` column plus the term that made it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def with_shaped_reward(
    table: pa.Table, reward: np.ndarray, term: str, values: np.ndarray
) -> pa.Table:
    """`table` with `reward` replaced (float32, same position) and `term` appended."""
    idx = table.schema.get_field_index("reward")
    table = table.set_column(idx, "reward", pa.array(reward, pa.float32()))
    return table.append_column(term, pa.array(values, pa.float32()))
