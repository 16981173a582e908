"""Refill rounds in the graph (DAPO's "keep generating"): which node may ask for more prompt
groups, the sub-graph a round re-runs, the checks `rldag validate` makes, and how the filter
tells the engine how many groups it lacks (its table's schema metadata,
`rldag.refill:<node>`). The rounds themselves run in rldag.engine.refill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from rldag.config.errors import GraphError
from rldag.config.spec import NodeKind

if TYPE_CHECKING:
    from rldag.graph.dag import Graph, Node


def _key(node: str) -> bytes:
    return f"rldag.refill:{node}".encode()


def with_shortfall(table: pa.Table, node: str, groups: int) -> pa.Table:
    """`table` saying that its node lacks `groups` prompt groups (0: it has enough), so the
    engine runs another refill round while the node's bound allows."""
    metadata = dict(table.schema.metadata or {})
    metadata[_key(node)] = str(int(groups)).encode()
    return table.replace_schema_metadata(metadata)


def shortfall(table: pa.Table, node: str) -> int:
    """How many prompt groups `node`'s output table says it lacks (0 when it says nothing)."""
    return int((table.schema.metadata or {}).get(_key(node), b"0"))


def max_rounds(node: Node) -> int:
    """The most rounds an iteration of `node` runs (1 when the node does not refill)."""
    key = node.op.refill_rounds
    return int(getattr(node.params, key)) if key else 1


def refill_node(graph: Graph) -> Node | None:
    """The node whose shortfall makes an iteration run more rounds, if any."""
    return next((n for n in graph.nodes.values() if max_rounds(n) > 1), None)


def upstream(graph: Graph, name: str) -> list[str]:
    """The nodes whose tables reach `name` (not over the weights edge), in graph order: what a
    refill round runs again."""
    seen: set[str] = set()
    todo = list(graph.nodes[name].inputs.values())
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += graph.nodes[node].inputs.values()
    return [n for n in graph.order if n in seen]


def waits_for_refill(graph: Graph) -> dict[str, str]:
    """node -> the refilling node whose step of the previous iteration must have finished
    before the node's step starts: each node a refill round runs again (a round of iteration
    i runs before iteration i+1 moves the rollout engine to newer weights)."""
    node = refill_node(graph)
    return {name: node.name for name in upstream(graph, node.name)} if node else {}


def check_refill(graph: Graph, where: str) -> None:
    """One refilling node at most, and each source it re-runs draws fresh prompts per round."""
    refilling = [n for n in graph.nodes.values() if max_rounds(n) > 1]
    if not refilling:
        return
    first = refilling[0]
    path = f"nodes.{first.name}.params.{first.op.refill_rounds}"
    if len(refilling) > 1:
        names = ", ".join(f"'{n.name}'" for n in refilling)
        raise GraphError(
            f"nodes {names} all run refill rounds; one node per pipeline may (set "
            f"{refilling[1].op.refill_rounds}: 1 on the others)",
            path=f"nodes.{refilling[1].name}.params.{refilling[1].op.refill_rounds}",
            where=where,
        )
    rounds = max_rounds(first)
    for name in upstream(graph, first.name):
        node = graph.nodes[name]
        if node.kind == NodeKind.source and not node.op.draws:
            raise GraphError(
                f"node '{first.name}' runs up to {rounds} rounds, each on fresh prompts, but "
                f"source '{name}' (op {node.op.name}) serves one batch per iteration: use a "
                "source that draws a new batch per round (dataset, hf_dataset) or set "
                f"{first.op.refill_rounds}: 1",
                path=path,
                where=where,
            )
