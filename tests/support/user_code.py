"""User code referenced from test pipelines as `tests.support.user_code:<name>`."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from operators.source.dataset import DATASET
from rldag import NodeKind, OperatorDef, Port, col, columns


def echo_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None) -> dict:
    """A veRL-style reward that returns a dict: 1.0 when the response equals the truth."""
    return {"score": float(solution_str == ground_truth), "source": data_source}


def _answer_half(_params: object):
    def run(inputs, ctx):
        table = inputs["prompts"]
        # Every even prompt id answers correctly, odd ones answer "x".
        even = pc.equal(pc.bit_wise_and(table["prompt_id"], 1), 0)
        response = pc.if_else(even, table["ground_truth"], pa.scalar("x"))
        ctx.log.info("answered %d prompts of iteration %d", table.num_rows, ctx.iteration)
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


def _worker_info(_params: object):
    def run(inputs, ctx):
        import os

        import ray

        table = inputs["rows"]
        n = table.num_rows
        info = {
            "rank": pa.array([ctx.rank] * n, pa.int32()),
            "world_size": pa.array([ctx.world_size] * n, pa.int32()),
            "ray_node": pa.array([ray.get_runtime_context().get_node_id()] * n),
            "gpu_ids": pa.array([",".join(str(g) for g in ray.get_gpu_ids())] * n),
            "master_addr": pa.array([os.environ.get("MASTER_ADDR", "")] * n),
            "ip": pa.array([ray.util.get_node_ip_address()] * n),
            "pid": pa.array([os.getpid()] * n, pa.int64()),
        }
        for name, values in info.items():
            table = table.append_column(name, values)
        return table

    return run


WORKER_INFO = OperatorDef(
    name="worker_info",
    kind=NodeKind.transform,
    factory=_worker_info,
    ports=(Port("rows"),),
    adds=(
        col("rank", pa.int32()),
        col("world_size", pa.int32()),
        col("ray_node", pa.string()),
        col("gpu_ids", pa.string()),
        col("master_addr", pa.string()),
        col("ip", pa.string()),
        col("pid", pa.int64()),
    ),
    stateful=True,
)


SINGLE_WORKER = OperatorDef(
    name="single_worker",
    kind=NodeKind.transform,
    factory=_worker_info,
    ports=(Port("rows"),),
    adds=WORKER_INFO.adds,
    max_workers=1,
)


def _fail_at_iteration_1(_params: object):
    def run(inputs, ctx):
        if ctx.iteration == 1:
            raise RuntimeError("scorer exploded on purpose")
        return inputs["rows"]

    return run


FAIL_AT_ITERATION_1 = OperatorDef(
    name="fail_at_iteration_1",
    kind=NodeKind.transform,
    factory=_fail_at_iteration_1,
    ports=(Port("rows"),),
)


def timed_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None) -> float:
    """The arithmetic reward, appending when each row was scored (time.perf_counter, the
    system's monotonic clock) to the file $SCORED_AT: reward calls run in a forked worker."""
    import os
    import time

    from operators.score.rewards.arithmetic import compute_score

    with open(os.environ["SCORED_AT"], "a") as f:
        f.write(f"{time.perf_counter()}\n")
    return compute_score(data_source, solution_str, ground_truth, extra_info)


def _four_samples(_params: object):
    def run(inputs, ctx):
        table = inputs["prompts"]
        # Each prompt becomes a group of 4 rows, sample_idx 0..3, answering "0".."3".
        rows = pa.array([i for i in range(table.num_rows) for _ in range(4)], pa.int64())
        out = table.take(rows)
        samples = pa.array([s for _ in range(table.num_rows) for s in range(4)], pa.int32())
        return out.append_column("sample_idx", samples).append_column(
            "response", pc.cast(samples, pa.string())
        )

    return run


FOUR_SAMPLES = OperatorDef(
    name="four_samples",
    kind=NodeKind.transform,
    factory=_four_samples,
    ports=(Port("prompts", columns("prompt_id")),),
    adds=(col("sample_idx"), col("response")),
    passthrough=True,
)


# A source that serves one batch per iteration whatever the refill round (it does not draw):
# refill rounds cannot get fresh prompts from it.
ONE_BATCH_SOURCE = dataclasses.replace(DATASET, name="one_batch_source", draws=False)
