"""Refill rounds draw fresh prompts so that the prompt stream is consumed once, in an order
that timing cannot change, and a resumed run draws what the uninterrupted one drew
(rldag/engine/refill.py; the runs themselves: tests/operators/transform/test_dapo.py)."""

from __future__ import annotations

import random

import pytest

from rldag.config.spec import load_pipeline
from rldag.engine.refill import ROUNDS, Refill
from rldag.engine.scheduler import Step
from rldag.graph.dag import build_graph
from tests.support.paths import ROOT

ITERATIONS = 8


@pytest.fixture(scope="module")
def graph(tiny_task):
    overrides = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        f"iterations={ITERATIONS}",
    ]
    return build_graph(load_pipeline(ROOT / "examples" / "dapo.yaml", overrides))


def refill(graph, k: int, rounds: dict[int, int]) -> Refill:
    made = Refill.of(graph, load_pipeline(ROOT / "examples" / "dapo.yaml").spec)
    made.k, made.iterations, made.rounds = k, ITERATIONS, dict(rounds)
    return made


def draws(made: Refill, graph, rounds: dict[int, int], metrics=()) -> dict[tuple[int, int], int]:
    source = graph.nodes["prompts"]
    return {
        (i, r): made.draw(Step(i, "prompts", r), source, list(metrics))
        for i in range(ITERATIONS)
        for r in range(rounds[i])
    }


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_every_batch_of_the_stream_is_drawn_once_without_gap(graph, k):
    rng = random.Random(k)
    rounds = {i: rng.choice([1, 1, 2, 3]) for i in range(ITERATIONS)}
    drawn = draws(refill(graph, k, rounds), graph, rounds)
    assert sorted(drawn.values()) == list(range(sum(rounds.values())))


def test_synchronous_rounds_draw_the_next_batches_as_verl_does(graph):
    rounds = {0: 2, 1: 1, 2: 3, **{i: 1 for i in range(3, ITERATIONS)}}
    drawn = draws(refill(graph, 0, rounds), graph, rounds)
    assert [drawn[(i, r)] for i, r in sorted(drawn)] == list(range(sum(rounds.values())))


@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_batch_is_known_from_what_has_finished_when_its_step_runs(graph, k):
    """Round 0 of iteration j needs the rounds of iterations before j - k only (finished
    when j opens); a refill round of i those before i (the filter runs in order)."""
    rounds = {i: 1 + i % 3 for i in range(ITERATIONS)}
    every = draws(refill(graph, k, rounds), graph, rounds)
    source = graph.nodes["prompts"]
    for (i, r), batch in every.items():
        known = range(max(0, i - k)) if r == 0 else range(i)
        partial = refill(graph, k, {j: rounds[j] for j in known})
        assert partial.draw(Step(i, "prompts", r), source, []) == batch


def test_a_resumed_run_draws_from_the_rounds_stored_in_the_metrics(graph):
    rounds = {i: 1 + (i * 5) % 3 for i in range(ITERATIONS)}
    uninterrupted = draws(refill(graph, 1, rounds), graph, rounds)
    metrics = [{"iteration": float(i), ROUNDS: float(n)} for i, n in rounds.items()]
    resumed = refill(graph, 1, {})  # a new process: nothing recorded, the metrics loaded
    assert draws(resumed, graph, rounds, metrics) == uninterrupted


def test_without_rounds_recorded_a_draw_is_refused_not_guessed(graph):
    made = refill(graph, 0, {})
    with pytest.raises(RuntimeError, match="refill rounds of iteration 0 are not known"):
        made.draw(Step(1, "prompts"), graph.nodes["prompts"], [])


def test_only_sources_draw_and_a_run_without_refill_keeps_iteration_batches(graph, tiny_task):
    made = refill(graph, 0, {0: 3})
    assert made.draw(Step(1, "generate"), graph.nodes["generate"], []) is None
    overrides = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.filter.params.max_rounds=1",
    ]
    loaded = load_pipeline(ROOT / "examples" / "dapo.yaml", overrides)
    plain = Refill.of(build_graph(loaded), loaded.spec)
    assert plain.node is None and plain.draw(Step(5, "prompts"), graph.nodes["prompts"], []) is None
