"""Streaming into training: with a trainer on workers of its own, its optimizer steps start on
the first chunks, before generate of the same iteration has finished, in process and on Ray,
and a streamed run trains as the run on whole tables does."""

from __future__ import annotations

import time

import pytest

from rldag.engine.events import NodeFinished, NodeStarted, add_listener
from tests.e2e.test_async import COMPARED, run_reference, stored_rows
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


@pytest.fixture(scope="module")
def whole_tables(tmp_path_factory):
    """Two iterations on whole tables (no streaming), in this process."""
    return run_reference(
        tmp_path_factory.mktemp("whole"), "iterations=2", "async.chunk_groups=0", in_process=True
    )


def test_streamed_training_on_ray_trains_as_whole_tables_do(ray_local, tmp_path, whole_tables):
    times: dict[str, float] = {}

    def listen(event: object) -> None:
        if isinstance(event, NodeStarted) and event.iteration == 0 and event.node == "train":
            times["train"] = time.perf_counter()
        if isinstance(event, NodeFinished) and event.iteration == 0 and event.node == "generate":
            times["generate"] = time.perf_counter()

    remove = add_listener(listen)
    try:
        run = run_reference(tmp_path, "iterations=2", "async.chunk_groups=3", "pools.colocate=[]")
    finally:
        remove()
    assert times["train"] < times["generate"]  # it started on the first chunks
    got, expected = stored_rows(run, "advantage", 2), stored_rows(whole_tables, "advantage", 2)
    assert got.keys() == expected.keys()
    for key, ref in expected.items():
        assert {k: got[key][k] for k in COMPARED} == {k: ref[k] for k in COMPARED}
    for row, ref in zip(run.metrics(), whole_tables.metrics(), strict=True):
        keys = [k for k in ref if k.startswith("train/") and not k.endswith(("_s", "_per_s"))]
        assert {k: row[k] for k in keys} == pytest.approx({k: ref[k] for k in keys}, abs=1e-5)
