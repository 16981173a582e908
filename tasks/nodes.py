"""One Prefect task per node kind; each task run is named after its pipeline node.

Tasks pass only handles (URI, rows, bytes); the tables stay with the run's pools.
"""

from __future__ import annotations

from functools import cache

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from rldag.graph import Node
from rldag.run import get_run
from rldag.spec import NodeKind
from rldag.storage import TableHandle

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


@task(cache_policy=NO_CACHE, persist_result=False)
def run_node(
    run_id: str, iteration: int, node: str, upstream: dict[str, TableHandle | None]
) -> TableHandle:
    """Execute one node of one iteration; `upstream` only orders and links the graph."""
    handle = get_run(run_id).execute_node(iteration, node)
    where = handle.uri or "not persisted"
    get_run_logger().info("%d rows, %d bytes -> %s", handle.rows, handle.bytes, where)
    return handle


_TASKS: dict[NodeKind, Task] = {
    kind: run_node.with_options(name=kind.value, retries=retries)
    for kind, retries in RETRIES.items()
}


def node_task(node: Node) -> Task:
    """The Prefect task of `node`'s kind, with the task run named after the node (built once
    per node: `with_options` constructs a whole Task, a few ms per iteration otherwise)."""
    return _named_task(node.kind, node.name)


@cache
def _named_task(kind: NodeKind, name: str) -> Task:
    return _TASKS[kind].with_options(task_run_name=name)
