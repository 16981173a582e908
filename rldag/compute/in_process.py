"""Where nodes run: the one narrow seam between the graph and the compute.

`InProcessPools` runs every pool in the driver process (the laptop default); the Ray
pools (rldag.compute.ray_pools) replace it with worker groups per pool without touching graph,
scheduler or drivers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from rldag.compute.weights.wire import from_wire, to_wire
from rldag.graph.dag import Node
from rldag.graph.operator import (
    Checkpointable,
    Closable,
    NodeContext,
    OperatorInstance,
    PolicyHolder,
    StreamingOperator,
)


@dataclass(frozen=True)
class WeightsSnapshot:
    """A policy version frozen when its train step finished, for a generate step that runs
    later while training goes on (async.max_staleness > 0)."""

    version: int
    weights: Any  # in-process: a dict of tensor copies; on Ray: an object reference
    pending: tuple[Any, ...] = field(default=())  # Ray: other ranks' gathers to wait for


class NodeRunner(Protocol):
    """Runs a node's operator on its pool and moves weights along the weights edge."""

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table: ...

    def stream(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> Iterator[pa.Table]: ...

    def snapshot_weights(self, source: Node) -> WeightsSnapshot: ...

    def sync_weights(
        self, source: Node, target: Node, snapshot: WeightsSnapshot | None = None
    ) -> tuple[int, float]: ...

    def snapshot_to_wire(self, snapshot: WeightsSnapshot) -> dict[str, Any]: ...

    def snapshot_from_wire(self, version: int, weights: dict[str, Any]) -> WeightsSnapshot: ...

    def save_checkpoint(self, node: Node, path: str) -> None: ...

    def load_checkpoint(self, node: Node, path: str) -> None: ...

    def export_hf(self, node: Node, path: str) -> None: ...

    def close(self) -> None: ...


def version_of(instance: object) -> int:
    """The policy version an operator holds (0 for operators without weights)."""
    return instance.policy_version if isinstance(instance, PolicyHolder) else 0


def policy(instance: object) -> PolicyHolder:
    if not isinstance(instance, PolicyHolder):
        raise TypeError(f"{type(instance).__name__} holds no policy weights (PolicyHolder)")
    return instance


def streaming(instance: object) -> StreamingOperator:
    if not isinstance(instance, StreamingOperator):
        raise TypeError(f"{type(instance).__name__} does not stream (StreamingOperator)")
    return instance


def checkpointable(instance: object) -> Checkpointable:
    if not isinstance(instance, Checkpointable):
        raise TypeError(f"{type(instance).__name__} is not Checkpointable")
    return instance


def copy_weights(weights: dict[str, Any]) -> dict[str, Any]:
    """Tensors cloned (a frozen version), anything else as is."""
    return {k: v.detach().clone() if hasattr(v, "detach") else v for k, v in weights.items()}


def pull_weights(src: object, dst: object) -> tuple[int, bool]:
    """Copy `src`'s policy into `dst` when it is newer; (version dst holds, whether copied)."""
    version = version_of(src)
    if version <= version_of(dst):
        return version_of(dst), False
    policy(dst).load_weights(policy(src).export_weights(), version)
    return version, True


def close_all(instances: Mapping[str, object]) -> None:
    """Release what the operators hold."""
    for inst in instances.values():
        if isinstance(inst, Closable):
            inst.close()


class InProcessPools:
    """All pools in this process: operators are built once per node and kept for the run."""

    def __init__(self) -> None:
        self._instances: dict[str, OperatorInstance] = {}
        self._building = threading.Lock()
        self.operator_seconds: dict[str, float] = {}  # last call per node (for bench/)

    def instance(self, node: Node) -> OperatorInstance:
        """The node's operator, built on first use, one build at a time: steps run in
        threads, and loading Hugging Face models is not thread-safe (from_pretrained sets a
        process-wide meta-device default while it builds)."""
        with self._building:
            if node.name not in self._instances:
                self._instances[node.name] = node.op.factory(node.params)
            return self._instances[node.name]

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        instance = self.instance(node)
        start = time.perf_counter()
        out = instance(inputs, ctx)
        self.operator_seconds[node.name] = time.perf_counter() - start
        return out

    def stream(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> Iterator[pa.Table]:
        """The chunks of a streaming operator (StreamingOperator.stream)."""
        start = time.perf_counter()
        yield from streaming(self.instance(node)).stream(inputs, ctx)
        self.operator_seconds[node.name] = time.perf_counter() - start

    def snapshot_weights(self, source: Node) -> WeightsSnapshot:
        src = policy(self.instance(source))
        return WeightsSnapshot(src.policy_version, copy_weights(src.export_weights()))

    def sync_weights(
        self, source: Node, target: Node, snapshot: WeightsSnapshot | None = None
    ) -> tuple[int, float]:
        """Bring `target` to `snapshot`'s version (or to `source`'s current policy) when it
        is newer; returns the version `target` holds and the seconds the copy took."""
        dst = self.instance(target)
        start = time.perf_counter()
        if snapshot is None:
            version, copied = pull_weights(self.instance(source), dst)
        elif snapshot.version > version_of(dst):
            policy(dst).load_weights(snapshot.weights, snapshot.version)
            version, copied = snapshot.version, True
        else:
            version, copied = version_of(dst), False
        return version, time.perf_counter() - start if copied else 0.0

    def snapshot_to_wire(self, snapshot: WeightsSnapshot) -> dict[str, Any]:
        """A frozen version in wire form (rldag.compute.weights.wire), to save with a checkpoint."""
        return to_wire(snapshot.weights)

    def snapshot_from_wire(self, version: int, weights: dict[str, Any]) -> WeightsSnapshot:
        return WeightsSnapshot(version, from_wire(weights))

    def save_checkpoint(self, node: Node, path: str) -> None:
        checkpointable(self.instance(node)).save_checkpoint(path)

    def load_checkpoint(self, node: Node, path: str) -> None:
        checkpointable(self.instance(node)).load_checkpoint(path)

    def export_hf(self, node: Node, path: str) -> None:
        checkpointable(self.instance(node)).export_hf(path)

    def close(self) -> None:
        close_all(self._instances)
        self._instances.clear()
