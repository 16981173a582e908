"""Whether a node whose operator streams (runs on its input's chunks as they arrive) must wait
for its whole input after all, and why: its params say so (a batch-wide advantage estimator,
a trainer's several epochs), or, for a chunk consumer (a trainer) on Ray, its pool has
several ranks or shares its workers with the node making the chunks.

`rldag.graph.dag.build_graph` turns streaming off on such nodes and keeps the reason, which
`rldag plan` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rldag.config.spec import PipelineSpec, PoolName

if TYPE_CHECKING:
    from rldag.graph.dag import Node


def shares_workers(spec: PipelineSpec, a: str, b: str) -> bool:
    """Whether pools `a` and `b` run on the same worker processes (pools.colocate)."""
    if a == b:
        return True
    return any({a, b} <= set(group) for group in spec.pools.colocate)


def _chunk_makers(node: Node, nodes: Mapping[str, Node]) -> list[Node]:
    """The nodes upstream of `node` that make chunks (generate), through streaming nodes."""
    found, frontier = [], list(node.inputs.values())
    while frontier:
        up = nodes[frontier.pop()]
        if up.op.emits_chunks:
            found.append(up)
        elif up.op.streams:
            frontier.extend(up.inputs.values())
    return found


def _on_ray_workers(node: Node, spec: PipelineSpec) -> bool:
    return spec.ray.enabled and node.pool != PoolName.driver


def wait_reason(node: Node, nodes: Mapping[str, Node], spec: PipelineSpec) -> str:
    """Why `node`, whose operator streams, needs its whole input ("" when it can stream;
    `nodes`: the graph's nodes by name)."""
    if not node.op.streams:
        return ""
    if node.op.waits_for is not None and (reason := node.op.waits_for(node.params)):
        return reason
    if not (node.op.consumes_chunks and _on_ray_workers(node, spec)):
        return ""
    workers = spec.pools.named[node.pool].workers
    if workers > 1:
        return (
            f"{workers} ranks (pools.{node.pool}.workers) split the whole batch between them; "
            "streaming trains on one rank"
        )
    for maker in _chunk_makers(node, nodes):
        if _on_ray_workers(maker, spec) and shares_workers(spec, node.pool, maker.pool):
            return (
                f"it shares workers with {maker.name} (pools.colocate) and a worker runs one "
                f"call at a time: pools.colocate=[] lets it train while {maker.name} runs"
            )
    return ""
