"""Where nodes run: the one narrow seam between the graph and the compute.

`InProcessPools` runs every pool in the driver process (the laptop default); the Ray
scheduler replaces it with worker groups per pool without touching graph, tasks or flows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

import pyarrow as pa

from rldag.graph import Node
from rldag.operator import NodeContext, OperatorInstance


class NodeRunner(Protocol):
    """Runs a node's operator on its pool and moves weights along the weights edge."""

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table: ...

    def sync_weights(self, source: Node, target: Node) -> tuple[int, float]: ...

    def call(self, node: Node, method: str, *args: object) -> object: ...

    def close(self) -> None: ...


class InProcessPools:
    """All pools in this process: operators are built once per node and kept for the run."""

    def __init__(self) -> None:
        self._instances: dict[str, OperatorInstance] = {}
        self.operator_seconds: dict[str, float] = {}  # last call per node (for bench/)

    def instance(self, node: Node) -> OperatorInstance:
        """The node's operator, built on first use."""
        if node.name not in self._instances:
            self._instances[node.name] = node.op.factory(node.params)
        return self._instances[node.name]

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        instance = self.instance(node)
        start = time.perf_counter()
        out = instance(inputs, ctx)
        self.operator_seconds[node.name] = time.perf_counter() - start
        return out

    def sync_weights(self, source: Node, target: Node) -> tuple[int, float]:
        """Copy the policy from `source` to `target` in memory when it is newer.

        Returns the version `target` now holds and the seconds the copy took (0 if none).
        """
        src, dst = self.instance(source), self.instance(target)
        version = getattr(src, "policy_version", 0)
        if version <= getattr(dst, "policy_version", 0):
            return getattr(dst, "policy_version", 0), 0.0
        start = time.perf_counter()
        dst.load_weights(src.export_weights(), version)
        return version, time.perf_counter() - start

    def call(self, node: Node, method: str, *args: object) -> object:
        """Call a method of the node's operator (checkpoint, restore, export)."""
        return getattr(self.instance(node), method)(*args)

    def close(self) -> None:
        for inst in self._instances.values():
            close = getattr(inst, "close", None)
            if close is not None:
                close()
        self._instances.clear()
