"""One Prefect task per node of a run: its task runs are named after the node and receive the
handles of the edges they consume (never tables); they run the node through the run.

A node whose output others read while it runs (chunks of a generate or per-chunk node) is
not retried: its readers would have seen the failed attempt.
"""

from __future__ import annotations

from collections.abc import Mapping

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from rldag.config.spec import NodeKind
from rldag.engine.run import EdgeHandle, Run
from rldag.engine.scheduler import Step, emits_chunks
from rldag.graph.dag import Node

# The contract of each kind as Prefect sees it: how often a failure is retried.
# Train steps the optimizer and is never retried blindly.
RETRIES = {
    NodeKind.source: 1,
    NodeKind.generate: 0,
    NodeKind.sandbox: 1,
    NodeKind.score: 1,
    NodeKind.transform: 0,
    NodeKind.train: 0,
}


def node_task(run: Run, node: Node) -> Task:
    """The Prefect task that runs `node` of `run` for one iteration (built once per node)."""

    def execute(iteration: int, inputs: Mapping[str, EdgeHandle]) -> EdgeHandle:
        handle = run.execute(Step(iteration, node.name), inputs)
        where = handle.uri or "not persisted"
        get_run_logger().info("%d rows, %d bytes -> %s", handle.rows, handle.bytes, where)
        return handle

    execute.__doc__ = f"Run node '{node.name}' ({node.op.name}) for one iteration."
    retries = 0 if emits_chunks(node) else RETRIES[node.kind]
    return task(
        execute,
        name=node.kind.value,
        task_run_name=node.name,
        retries=retries,
        cache_policy=NO_CACHE,
        persist_result=False,
    )
