"""Small hand-built graphs and cost tables for the simulator and planner tests."""

from __future__ import annotations

import pyarrow as pa

from rldag.config.spec import NodeKind, NodeSpec
from rldag.graph.dag import Graph, Node
from rldag.graph.operator import OperatorDef
from rldag.planning.costs import CostModel, NodeCost


def node(name: str, kind: NodeKind, inputs: dict[str, str], **op: object) -> Node:
    """A node whose operator does nothing: only its streaming flags matter here."""
    opdef = OperatorDef(name=f"fake_{name}", kind=kind, factory=lambda p: None, **op)
    spec = NodeSpec(kind=kind, op=opdef.name)
    return Node(name, spec, opdef, None, inputs, None, pa.schema([]))


def chain(*stages: tuple[str, NodeKind, dict]) -> Graph:
    """A line of nodes, each reading the previous one; generate loads train's weights."""
    nodes: dict[str, Node] = {}
    previous = None
    for name, kind, op in stages:
        n = node(name, kind, {"in": previous} if previous else {}, **op)
        nodes[name] = n
        previous = name
    trains = [n for n in nodes.values() if n.kind == NodeKind.train]
    for n in nodes.values():
        if n.kind == NodeKind.generate and trains:
            n.weights_from = trains[0].name
    return Graph(nodes)


def costs(
    seconds: dict[str, float],
    samples: float = 12.0,
    groups: float = 4.0,
    sync_s: float = 0.0,
    driver_s: float = 0.0,
) -> CostModel:
    """A cost model where each node's call takes the given seconds at one worker (all of it
    per row, so it halves on two workers)."""
    nodes = {
        name: NodeCost(name, "x", "p", per_row_s=s / groups, workers=1, rows=groups)
        for name, s in seconds.items()
    }
    return CostModel(nodes, {"split": sync_s, "colocated": sync_s}, 1, driver_s, samples, groups)
