"""Streaming into training: a trainer's optimizer steps start on the first chunks, before
generate of the same iteration has finished (that a streamed run trains as whole tables do, in
process and on Ray: tests/e2e/test_async.py)."""

from __future__ import annotations

import time

from rldag.engine.events import NodeFinished, NodeStarted, add_listener
from tests.e2e.test_async import run_reference
from tests.support import timed_train


def test_training_steps_start_before_generate_finishes(tiny_task, tmp_path):
    times: dict[tuple[str, str], float] = {}

    def listen(event: object) -> None:
        if isinstance(event, NodeStarted | NodeFinished):
            times[(event.node, "start" if isinstance(event, NodeStarted) else "end")] = (
                time.perf_counter()
            )

    timed_train.CONSUMED_AT.clear()
    remove = add_listener(listen)
    try:
        run = run_reference(
            tmp_path,
            "iterations=1",
            "ray.enabled=false",
            "async.chunk_groups=2",
            "nodes.train.op=tests.support.timed_train:TIMED_POLICY_GRADIENT",
            "nodes.train.params.mini_batch_size=8",  # a step per chunk of 2 groups x 4 samples
            "nodes.generate.params.max_batch_size=8",  # 2 groups decode at a time: 4 waves
            "nodes.generate.params.max_new_tokens=56",
            "nodes.generate.params.ignore_eos=true",  # 56 steps a wave: a window to train in
        )
    finally:
        remove()
    consumed = timed_train.CONSUMED_AT
    assert len(consumed) == 4 and run.table("train", 0).num_rows == 4  # one step per chunk
    # The first chunk's step has been taken while generate still decodes later waves.
    assert times[("train", "start")] < consumed[0] < times[("generate", "end")]
