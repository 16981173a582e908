"""The simulator against hand-computed runs: two or three stages with known costs, sync,
k = 1, weight sync, streaming chunks, the driver's own time; it drives the real Scheduler."""

from __future__ import annotations

import pytest

from rldag.config.spec import NodeKind
from rldag.planning.simulator import DRIVER, SimPlan, simulate
from tests.support.sim_graphs import chain, costs

GEN_TRAIN = chain(
    ("generate", NodeKind.generate, {"emits_chunks": True}),
    ("train", NodeKind.train, {}),
)
SPLIT = {"generate": "rollout", "train": "training"}
COLOCATED = {"generate": "training+rollout", "train": "training+rollout"}


def test_sync_iteration_is_the_sum_of_its_stages() -> None:
    plan = SimPlan(COLOCATED, {"training+rollout": 1}, max_staleness=0, split_weights=False)
    result = simulate(GEN_TRAIN, costs({"generate": 2.0, "train": 1.0}), plan, iterations=5)
    assert result.iteration_ends == pytest.approx([3, 6, 9, 12, 15])
    assert result.samples_per_s == pytest.approx(12 / 3)
    assert result.staleness == {0: 1.0}
    assert result.idle == {"training+rollout": pytest.approx(0.0)}


def test_k1_overlaps_generation_with_training() -> None:
    # gen0 0-2, train0 2-3; gen1 2-4, train1 4-5; gen2 opens at 3 (iteration 0 done) but
    # waits for gen1: 4-6, train2 6-7 ... one iteration per 2 s, the slowest stage
    plan = SimPlan(SPLIT, {"rollout": 1, "training": 1}, max_staleness=1)
    result = simulate(GEN_TRAIN, costs({"generate": 2.0, "train": 1.0}), plan, iterations=5)
    assert result.iteration_ends == pytest.approx([3, 5, 7, 9, 11])
    assert result.samples_per_s == pytest.approx(12 / 2)
    assert result.staleness == {0: 0.2, 1: 0.8}
    # steady window 5-11 s: rollout busy 5-6, 6-8, 8-10 (train4 ends the run at 11)
    assert result.idle["rollout"] == pytest.approx(1 / 6)
    assert result.idle["training"] == pytest.approx(0.5)


def test_sync_split_pools_idle_while_the_other_works() -> None:
    plan = SimPlan(SPLIT, {"rollout": 1, "training": 1}, max_staleness=0)
    result = simulate(GEN_TRAIN, costs({"generate": 2.0, "train": 1.0}), plan, iterations=5)
    assert result.idle == {"rollout": pytest.approx(1 / 3), "training": pytest.approx(2 / 3)}


def test_weight_sync_runs_before_every_generate_at_k0_and_from_version_1_at_k1() -> None:
    model = costs({"generate": 2.0, "train": 1.0}, sync_s=0.5)
    sync = simulate(GEN_TRAIN, model, SimPlan(SPLIT, {}, max_staleness=0), iterations=3)
    assert sync.iteration_ends == pytest.approx([3.5, 7.0, 10.5])
    assert sync.weight_sync_s == 0.5
    # k=1: gen0 and gen1 run on version 0 (no sync): 0-2, 2-4; train 2-3, 4-5; gen2 loads
    # version 1 at 4-4.5 and generates 4.5-6.5, train2 6.5-7.5; gen3 6.5-9, train3 9-10
    lagged = simulate(GEN_TRAIN, model, SimPlan(SPLIT, {}, max_staleness=1), iterations=4)
    assert lagged.iteration_ends == pytest.approx([3, 5, 7.5, 10])


def test_streaming_reader_handles_each_chunk_as_it_arrives() -> None:
    graph = chain(
        ("generate", NodeKind.generate, {"emits_chunks": True}),
        ("score", NodeKind.score, {"streams": True}),
        ("train", NodeKind.train, {}),
    )
    groups = {"generate": "rollout", "score": DRIVER, "train": "training"}
    model = costs({"generate": 2.0, "score": 1.0, "train": 1.0}, groups=4.0)
    # 2 chunks of 2 groups: chunk 0 at 1 s, scored 1-1.5; chunk 1 at 2 s, scored 2-2.5;
    # train 2.5-3.5: 0.5 s less than scoring the whole table after generation
    streamed = simulate(graph, model, SimPlan(groups, {}, chunk_groups=2), iterations=3)
    assert streamed.iteration_ends == pytest.approx([3.5, 7.0, 10.5])
    whole = simulate(graph, model, SimPlan(groups, {}, chunk_groups=0), iterations=3)
    assert whole.iteration_ends == pytest.approx([4, 8, 12])


def test_driver_time_per_iteration_delays_the_next_iteration() -> None:
    model = costs({"generate": 2.0, "train": 1.0}, driver_s=0.25)
    result = simulate(GEN_TRAIN, model, SimPlan(SPLIT, {}), iterations=3)
    assert result.iteration_ends == pytest.approx([3.25, 6.5, 9.75])


def test_more_workers_divide_the_per_row_work() -> None:
    plan = SimPlan(SPLIT, {"rollout": 2, "training": 1})
    result = simulate(GEN_TRAIN, costs({"generate": 2.0, "train": 1.0}), plan, iterations=3)
    assert result.iteration_ends == pytest.approx([2, 4, 6])


def test_nodes_of_one_worker_group_never_overlap() -> None:
    # k=1 on a shared group: generate of i+1 waits for train of i to free the workers
    plan = SimPlan(COLOCATED, {}, max_staleness=1, split_weights=False)
    result = simulate(GEN_TRAIN, costs({"generate": 2.0, "train": 1.0}), plan, iterations=4)
    assert result.iteration_ends == pytest.approx([3, 6, 9, 12])
