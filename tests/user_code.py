"""User code referenced from test pipelines as `tests.user_code:<name>`."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from rldag.operator import OperatorDef, Port
from rldag.schema import col, columns
from rldag.spec import NodeKind


def echo_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None) -> dict:
    """A veRL-style reward that returns a dict: 1.0 when the response equals the truth."""
    return {"score": float(solution_str == ground_truth), "source": data_source}


def _answer_half(_params: object):
    def run(inputs, ctx):
        table = inputs["prompts"]
        # Every even prompt id answers correctly, odd ones answer "x".
        even = pc.equal(pc.bit_wise_and(table["prompt_id"], 1), 0)
        response = pc.if_else(even, table["ground_truth"], pa.scalar("x"))
        return table.append_column("response", response.cast(pa.string()))

    return run


ANSWER_HALF = OperatorDef(
    name="answer_half",
    kind=NodeKind.transform,
    factory=_answer_half,
    ports=(Port("prompts", columns("prompt_id", "ground_truth")),),
    adds=(col("response"),),
)

NOT_AN_OPERATOR = 42


DOUBLE_REWARD = OperatorDef(
    name="double_reward",
    kind=NodeKind.transform,
    factory=lambda _params: (
        lambda inputs, ctx: inputs["rows"].append_column(
            "reward", pa.array([1.0] * inputs["rows"].num_rows, pa.float64())
        )
    ),
    ports=(Port("rows"),),
    adds=(col("reward", pa.float64()),),
)
