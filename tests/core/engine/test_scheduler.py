"""The execution scheduler, pure: what may start from what has started and finished."""

from __future__ import annotations

from rldag.config.spec import load_pipeline
from rldag.engine.scheduler import Scheduler, Step, weights_version
from rldag.graph.dag import build_graph
from tests.support.pipelines import grpo_nodes, scoring_pipeline

GRPO = ("prompts", "generate", "score", "advantage", "train")


def grpo_graph(write_yaml, dataset, **top: object):
    doc = {
        "name": "g",
        "model": {"path": "m"},
        "nodes": grpo_nodes("m", dataset, "tests.support.user_code:echo_score"),
        **top,
    }
    doc["nodes"]["prompts"]["params"]["batch_size"] = 6  # the dataset's rows
    return build_graph(load_pipeline(write_yaml(doc)))


def run_to_end(scheduler: Scheduler, finish_order=None) -> list[set[Step]]:
    """Start whatever is ready, finish the oldest running step, repeat: the sets of steps
    running at once."""
    running: list[Step] = []
    seen: list[set[Step]] = []
    while not scheduler.done:
        while steps := scheduler.ready():
            for step in steps:
                scheduler.start(step)
                running.append(step)
        seen.append(set(running))
        step = min(running, key=finish_order) if finish_order else running[0]
        running.remove(step)
        scheduler.finish(step)
    return seen


def test_k0_is_the_synchronous_loop(write_yaml, dataset):
    graph = grpo_graph(write_yaml, dataset)
    scheduler = Scheduler(graph, 0, 3, max_staleness=0, streaming=False)
    seen = run_to_end(scheduler)
    # One step at a time (unpacking fails otherwise), three iterations of the five nodes in
    # topological order, never two iterations at once.
    assert [s for (s,) in seen] == [Step(i, n) for i in range(3) for n in GRPO]


def test_streaming_readers_start_with_their_producer(write_yaml, dataset):
    graph = grpo_graph(write_yaml, dataset)
    scheduler = Scheduler(graph, 0, 1, max_staleness=0, streaming=True)
    scheduler.start(Step(0, "prompts"))
    scheduler.finish(Step(0, "prompts"))
    assert scheduler.ready() == [Step(0, "generate")]
    scheduler.start(Step(0, "generate"))
    assert scheduler.ready() == [Step(0, "score")]  # runs per chunk of generate
    scheduler.start(Step(0, "score"))
    assert scheduler.ready() == [Step(0, "advantage")]
    scheduler.start(Step(0, "advantage"))
    assert scheduler.ready() == []  # train shares workers with generate: its whole batch
    for name in ("generate", "score", "advantage"):
        scheduler.finish(Step(0, name))
    assert scheduler.ready() == [Step(0, "train")]


def test_a_trainer_on_workers_of_its_own_starts_on_the_first_chunk(write_yaml, dataset):
    graph = grpo_graph(write_yaml, dataset, pools={"colocate": []})
    scheduler = Scheduler(graph, 0, 1, max_staleness=0, streaming=True)
    scheduler.start(Step(0, "prompts"))
    scheduler.finish(Step(0, "prompts"))
    for name in ("generate", "score", "advantage"):
        scheduler.start(Step(0, name))
    assert scheduler.ready() == [Step(0, "train")]  # generate is still running


def test_k1_admits_generation_of_the_next_iteration_while_training(write_yaml, dataset):
    graph = grpo_graph(write_yaml, dataset)
    scheduler = Scheduler(graph, 0, 4, max_staleness=1, streaming=False)
    # Train finishes last: generate of i+1 must run while train of i is still waiting.
    order = {name: k for k, name in enumerate(GRPO)}
    seen = run_to_end(scheduler, finish_order=lambda s: (order[s.node] == 4, s))
    assert any({Step(0, "train"), Step(1, "generate")} <= now for now in seen)
    for now in seen:
        iterations = {s.iteration for s in now}
        assert max(iterations) - min(iterations) <= 1  # at most k+1 = 2 iterations in flight
        assert not {Step(2, "prompts"), Step(0, "train")} <= now  # 2 opens after 0 ends


def test_a_node_runs_its_iterations_one_at_a_time_in_order(write_yaml, dataset):
    doc = scoring_pipeline(dataset, iterations=4)
    graph = build_graph(load_pipeline(write_yaml(doc)))
    scheduler = Scheduler(graph, 0, 4, max_staleness=3, streaming=False)
    for now in run_to_end(scheduler):
        names = [s.node for s in now]
        assert len(names) == len(set(names))


def test_generate_of_iteration_i_runs_on_version_i_minus_k():
    assert [weights_version(i, 0) for i in range(4)] == [0, 1, 2, 3]
    assert [weights_version(i, 2) for i in range(5)] == [0, 0, 0, 1, 2]


def test_a_resumed_run_starts_at_its_first_iteration(write_yaml, dataset):
    graph = grpo_graph(write_yaml, dataset)
    scheduler = Scheduler(graph, 3, 5, max_staleness=1, streaming=False)
    assert scheduler.ready() == [Step(3, "prompts")]  # iterations before 3 count as done
    scheduler.start(Step(3, "prompts"))
    scheduler.finish(Step(3, "prompts"))
    assert scheduler.ready() == [Step(3, "generate"), Step(4, "prompts")]
