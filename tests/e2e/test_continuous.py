"""Continuous generation (`async.mode: continuous`): generate steps of consecutive iterations
overlap on one engine, weights land mid-sequence (partial rollouts), every row records the
version of each of its tokens, and no token trained at step t was sampled from a version
older than t - k."""

from __future__ import annotations

import time

from flows.cli import main
from rldag.engine.events import NodeFinished, NodeStarted, add_listener
from tests.e2e.test_async import REFERENCE, run_reference

ITERATIONS = 5
# Long answers (56 tokens, eos ignored) in 8 slots for 32 samples: generate of an iteration
# takes four waves, longer than the train step it overlaps, so the weights train publishes
# arrive while sequences decode.
LONG = (
    "nodes.generate.params.max_new_tokens=56",
    "nodes.generate.params.ignore_eos=true",
    "nodes.generate.params.max_batch_size=8",
)


def test_every_token_trained_at_step_t_comes_from_a_version_of_at_least_t_minus_k(
    tmp_path,
) -> None:
    k = 1  # k = 2: tests/e2e/test_chaos.py, killed and resumed
    spans: dict[str, float] = {}

    def listen(event: object) -> None:
        if isinstance(event, NodeStarted) and event.node == "generate":
            spans[f"start {event.iteration}"] = time.perf_counter()
        elif isinstance(event, NodeFinished) and event.node == "generate":
            spans[f"end {event.iteration}"] = time.perf_counter()

    remove = add_listener(listen)
    try:
        run = run_reference(
            tmp_path,
            f"async.max_staleness={k}",
            "async.mode=continuous",
            "pools.colocate=[]",
            f"iterations={ITERATIONS}",
            *LONG,
            in_process=True,
        )
    finally:
        remove()
    # generate of iteration i + 1 started while that of i still ran (the scheduler let it)
    assert all(spans[f"start {i + 1}"] < spans[f"end {i}"] for i in range(k))
    spanning = 0
    for t in range(ITERATIONS):
        trained = run.table("advantage", t)
        tokens = trained["response_versions"].to_pylist()
        assert all(len(v) == 56 for v in tokens)
        assert min(v for row in tokens for v in row) >= t - k  # the bound, on every token
        oldest, newest = trained["policy_version"], trained["policy_version_max"]
        assert oldest.to_pylist() == [min(row) for row in tokens]
        assert newest.to_pylist() == [max(row) for row in tokens]
        spanning += sum(len(set(row)) > 1 for row in tokens)
        assert run.table("train", t)["policy_version"][0].as_py() == t + 1
    assert spanning > 0  # some continued under weights published mid-way (measured: 16 of 160)
    metrics = run.metrics()
    assert all(m["staleness/token_max"] <= k for m in metrics)
    assert sum(m["rollout/spanning_rows"] for m in metrics) == spanning


def test_continuous_mode_needs_a_staleness_bound(capsys) -> None:
    code = main(["validate", str(REFERENCE), "async.mode=continuous"])
    err = capsys.readouterr().err
    assert code == 2
    assert "async.mode" in err and "async.max_staleness >= 1" in err


def test_on_rollout_servers_sequences_in_flight_continue_under_new_weights(tmp_path) -> None:
    """`engine: server`: overlapping iterations share the servers' batch, and an update is
    SGLang's pause(in_place) -> update -> continue, so answers span versions there too."""
    run = run_reference(
        tmp_path,
        "async.max_staleness=1",
        "async.mode=continuous",
        "pools.colocate=[]",
        "iterations=4",  # generate of 2 decodes when train of 1 publishes (0 and 1 warm up)
        "nodes.generate.params.engine=server",
        "nodes.generate.params.servers=1",
        *LONG,
        in_process=True,
    )
    spanning = 0
    for t in range(4):
        tokens = run.table("advantage", t)["response_versions"].to_pylist()
        assert min(v for row in tokens for v in row) >= t - 1
        spanning += sum(len(set(row)) > 1 for row in tokens)
    assert spanning > 0
