"""`pass_rate` score: the fraction of a program's tests that passed in the sandbox."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rldag import NodeContext, NodeKind, OperatorDef, Port, col, columns


def pass_rate(passed: np.ndarray, total: np.ndarray) -> np.ndarray:
    """passed / total per row; 0 where a row has no tests."""
    total = np.asarray(total, dtype=np.float64)
    rate = np.divide(passed, total, out=np.zeros_like(total), where=total > 0)
    return rate.astype(np.float32)


def _score(_params: object):
    def run(inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["executed"]
        passed = table["tests_passed"].to_numpy(zero_copy_only=False)
        total = table["tests_total"].to_numpy(zero_copy_only=False)
        return table.append_column("reward", pa.array(pass_rate(passed, total), pa.float32()))

    return run


PASS_RATE = OperatorDef(
    name="pass_rate",
    kind=NodeKind.score,
    factory=_score,
    ports=(Port("executed", columns("tests_passed", "tests_total")),),
    adds=(col("reward"),),
    streams=True,
    description="Reward = tests passed / tests total (0 without tests).",
)
