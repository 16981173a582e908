"""An agent's episodes carry their environment's reward; a score node downstream replaces it,
and the iteration's `reward/mean` is then the score node's (examples/agent_tools.yaml)."""

from __future__ import annotations

import pyarrow as pa

from rldag.config.spec import load_pipeline
from rldag.engine.metrics import iteration_metrics
from rldag.graph.dag import build_graph
from tests.support.paths import ROOT


def test_a_score_nodes_reward_is_the_iterations_reward_not_the_agents(tiny_task, dataset):
    loaded = load_pipeline(
        ROOT / "examples" / "agent_tools.yaml",
        [
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={dataset}",
            "nodes.prompts.params.batch_size=6",  # the fixture's 6 prompts
        ],
    )
    graph = build_graph(loaded)
    agent = pa.table({"reward": [0.0, 0.0], "response_ids": [[1], [2, 3]]})
    score = agent.set_column(0, "reward", pa.array([1.0, 0.5]))
    metrics = iteration_metrics(graph, {"agent": agent, "score": score}, {}, 0.0)
    assert metrics["reward/mean"] == 0.75 and metrics["response_length/mean"] == 1.5
    assert iteration_metrics(graph, {"agent": agent}, {}, 0.0)["reward/mean"] == 0.0
