"""A heavy environment for bench/async_vs_sync.py: every prompt group spends 50-200 ms in it
(like a sandbox or a remote verifier), with up to CONCURRENCY groups at once, as an
environment pool with that many slots would; it sleeps, so the CPUs stay free."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from rldag.config.spec import NodeKind
from rldag.graph.operator import NodeContext, OperatorDef, Port
from rldag.graph.schema import col, columns

CONCURRENCY = 16  # groups in the environment at once


def group_latency_s(prompt_id: int) -> float:
    """A fixed latency per prompt: 50-200 ms, spread over prompt ids."""
    return 0.05 + 0.15 * ((prompt_id * 37) % 100) / 99


class SlowEnvironment:
    """Holds each group for its latency, CONCURRENCY groups at a time; adds `env_seconds`."""

    def __init__(self, _params: object) -> None:
        self.pool = ThreadPoolExecutor(CONCURRENCY)

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        ids = table["prompt_id"].to_numpy()
        groups = np.unique(ids)
        latency = {int(g): group_latency_s(int(g)) for g in groups}
        list(self.pool.map(time.sleep, latency.values()))
        seconds = [latency[int(g)] for g in ids]
        return table.append_column("env_seconds", pa.array(seconds, pa.float32()))


SLOW_ENV = OperatorDef(
    name="slow_env",
    kind=NodeKind.transform,
    factory=SlowEnvironment,
    ports=(Port("rollouts", columns("prompt_id")),),
    adds=(col("env_seconds", pa.float32()),),
    streams=True,
    description="Bench: 50-200 ms per prompt group, CONCURRENCY groups at once.",
)
