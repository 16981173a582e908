"""The `policy_gradient` trainer, recording when it has taken each chunk (time.perf_counter,
after the chunk's forward/backward and any optimizer step it completed): for tests that
check training starts while generation goes on (pools in the test's process)."""

from __future__ import annotations

import time
from dataclasses import replace

import pyarrow as pa

from operators.train.policy_gradient import POLICY_GRADIENT, PolicyGradientTrainer
from rldag import NodeContext

CONSUMED_AT: list[float] = []


class TimedTrainer(PolicyGradientTrainer):
    """PolicyGradientTrainer appending to CONSUMED_AT once it has taken a chunk."""

    def consume(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> None:
        super().consume(inputs, ctx)
        CONSUMED_AT.append(time.perf_counter())


TIMED_POLICY_GRADIENT = replace(POLICY_GRADIENT, name="timed_policy_gradient", factory=TimedTrainer)
