"""Refill rounds draw fresh prompts so that the prompt stream is consumed once, in an order
that timing cannot change, and a resumed run draws what the uninterrupted one drew; a round
runs before the next iteration's generation (rldag/engine/refill.py; the runs themselves:
tests/operators/transform/test_dapo.py, tests/e2e/test_chaos.py)."""

from __future__ import annotations

import random

import pytest

from rldag.config.spec import load_pipeline
from rldag.engine import checkpoints
from rldag.engine.driver import InlineLauncher, drive
from rldag.engine.refill import ROUNDS, Refill
from rldag.engine.scheduler import Scheduler, Step
from rldag.graph.dag import Graph, build_graph
from tests.support.paths import ROOT
from tests.support.runs import drive_inline, start_run

ITERATIONS = 8


def dapo_graph(tiny_task, *overrides: str) -> Graph:
    paths = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"iterations={ITERATIONS}",
    ]
    return build_graph(load_pipeline(ROOT / "examples" / "dapo.yaml", [*paths, *overrides]))


@pytest.fixture(scope="module")
def graph(tiny_task) -> Graph:
    return dapo_graph(tiny_task)


def refill(graph, rounds: dict[int, int]) -> Refill:
    made = Refill.of(graph)
    made.rounds = dict(rounds)
    return made


def draws(made: Refill, graph, rounds: dict[int, int], metrics=()) -> dict[tuple[int, int], int]:
    source = graph.nodes["prompts"]
    return {
        (i, r): made.draw(Step(i, "prompts", r), source, list(metrics))
        for i in range(ITERATIONS)
        for r in range(rounds[i])
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rounds_draw_the_next_batches_of_the_stream_once_without_gap(graph, seed):
    """batch(0), refills(0), batch(1), ...: as veRL's recipe pulls its dataloader."""
    rng = random.Random(seed)
    rounds = {i: rng.choice([1, 1, 2, 3]) for i in range(ITERATIONS)}
    drawn = draws(refill(graph, rounds), graph, rounds)
    assert [drawn[key] for key in sorted(drawn)] == list(range(sum(rounds.values())))


def test_a_batch_is_known_from_the_iterations_before_its_own(graph):
    rounds = {i: 1 + i % 3 for i in range(ITERATIONS)}
    every = draws(refill(graph, rounds), graph, rounds)
    source = graph.nodes["prompts"]
    for (i, r), batch in every.items():
        before = refill(graph, {j: rounds[j] for j in range(i)})
        assert before.draw(Step(i, "prompts", r), source, []) == batch


def test_a_resumed_run_draws_from_the_rounds_stored_in_the_metrics(graph):
    rounds = {i: 1 + (i * 5) % 3 for i in range(ITERATIONS)}
    uninterrupted = draws(refill(graph, rounds), graph, rounds)
    metrics = [{"iteration": float(i), ROUNDS: float(n)} for i, n in rounds.items()]
    resumed = refill(graph, {})  # a new process: nothing recorded, the metrics loaded
    assert draws(resumed, graph, rounds, metrics) == uninterrupted


def test_without_rounds_recorded_a_draw_is_refused_not_guessed(graph):
    with pytest.raises(RuntimeError, match="refill rounds of iteration 0 are not known"):
        refill(graph, {}).draw(Step(1, "prompts"), graph.nodes["prompts"], [])


def test_only_sources_draw_and_a_run_without_refill_keeps_iteration_batches(graph, tiny_task):
    assert refill(graph, {0: 3}).draw(Step(1, "generate"), graph.nodes["generate"], []) is None
    plain = Refill.of(dapo_graph(tiny_task, "nodes.filter.params.max_rounds=1"))
    assert plain.node is None and plain.draw(Step(5, "prompts"), graph.nodes["prompts"], []) is None


def run_steps(scheduler: Scheduler, *steps: Step) -> None:
    for step in steps:
        scheduler.start(step)
        scheduler.finish(step)


def test_a_refill_round_runs_before_the_next_iterations_generation(graph):
    """k = 1: the nodes a round runs again wait for the filter of the iteration before (its
    rounds sample that iteration's weights first); generation still overlaps training."""
    scheduler = Scheduler(graph, 0, 3, max_staleness=1, streaming=False)
    run_steps(scheduler, *(Step(0, name) for name in ("prompts", "generate", "score")))
    assert scheduler.ready() == [Step(0, "filter")]
    run_steps(scheduler, Step(0, "filter"), Step(0, "overlong"), Step(0, "advantage"))
    scheduler.start(Step(0, "train"))
    run_steps(scheduler, Step(1, "prompts"))
    assert Step(1, "generate") in scheduler.ready()


def test_without_refill_the_next_iteration_does_not_wait_for_the_filter(tiny_task):
    plain = dapo_graph(tiny_task, "nodes.filter.params.max_rounds=1")
    scheduler = Scheduler(plain, 0, 3, max_staleness=1, streaming=False)
    run_steps(scheduler, Step(0, "prompts"))
    assert Step(1, "prompts") in scheduler.ready()


@pytest.mark.slow
def test_a_resumed_iteration_removes_the_rounds_a_killed_process_stored_beyond_its_own(
    tiny_task, tmp_path
):
    """Rounds of a killed process's attempt at an iteration are rewritten by the resumed one;
    one it needs no more (its generation came out otherwise) must not stay for readers."""
    overrides = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"storage.uri={tmp_path}",
        "ray.enabled=false",
        "iterations=2",
        "checkpoint.every=1",
        "nodes.prompts.params.batch_size=4",
        "nodes.prompts.params.oversample=1.0",
        "nodes.generate.params.n=4",
    ]
    first = drive_inline(start_run(ROOT / "examples" / "dapo.yaml", *overrides))
    rounds = first.rounds(1)
    stale = f"{first.run_id}/iter=1/round={len(rounds)}/prompts.parquet"
    first.storage.write_table(stale, first.table("prompts", 1))
    assert first.rounds(1) == [*rounds, len(rounds)]
    # as a process killed before it committed iteration 1 leaves it: resumed from iteration 0
    first.storage.write_text(f"{first.run_id}/{checkpoints.LATEST}", '{"iteration": 0}')

    run = start_run(ROOT / "examples" / "dapo.yaml", *overrides, run_id=first.run_id)
    drive(run, InlineLauncher(run), first=checkpoints.resume(run))
    assert first.rounds(1) == rounds  # the same rounds again, and no other
    assert [m["iteration"] for m in first.metrics()] == [0, 1]
