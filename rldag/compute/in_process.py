"""Every pool in the driver process (the laptop default): a NodeRunner over one
OperatorHost, whose weights edges are copies in memory."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from rldag.compute.host import OperatorHost, copy_weights
from rldag.compute.runner import WeightsSnapshot
from rldag.compute.weights.attest import check_loaded
from rldag.compute.weights.wire import from_wire, to_wire
from rldag.graph.dag import Node
from rldag.graph.operator import NodeContext


class InProcessPools:
    """All pools in this process: operators are built once per node and kept for the run."""

    def __init__(self) -> None:
        self.host = OperatorHost()
        self.operator_seconds: dict[str, float] = {}  # last call per node (for bench/)

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        out, self.operator_seconds[node.name] = self.host.run(node, inputs, ctx)
        return out

    def stream(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> Iterator[pa.Table]:
        """The chunks of a streaming operator (StreamingOperator.stream)."""
        start = time.perf_counter()
        for chunk, _ in self.host.stream(node, inputs, ctx):
            yield chunk
        self.operator_seconds[node.name] = time.perf_counter() - start

    def consume(
        self, node: Node, chunks: Iterable[Mapping[str, pa.Table]], ctx: NodeContext
    ) -> pa.Table:
        """A ChunkConsumer's table, fed each chunk's inputs as they arrive."""
        out, self.operator_seconds[node.name] = self.host.consume(node, chunks, ctx)
        return out

    def snapshot_weights(self, source: Node) -> WeightsSnapshot:
        version = self.host.policy_version(source)
        weights = copy_weights(self.host.export_weights(source))
        return WeightsSnapshot(version, weights, digest=self.host.weights_digest(source))

    def sync_weights(
        self, source: Node, target: Node, snapshot: WeightsSnapshot | None = None
    ) -> tuple[int, float]:
        """Bring `target` to `snapshot`'s version (or to `source`'s current policy) when it
        is newer and check that it serves it (rldag.compute.weights.attest); returns the
        version `target` holds and the seconds the copy took."""
        held = self.host.policy_version(target)  # builds the target first, as before
        start = time.perf_counter()
        if snapshot is None:
            newer = self.host.policy_version(source) > held
            expected = self.host.weights_digest(source) if newer else ""
            version, copied = self.host.pull_weights(source, target)
        elif snapshot.version > held:
            self.host.load_weights(target, snapshot.weights, snapshot.version)
            version, copied, expected = snapshot.version, True, snapshot.digest
        else:
            version, copied = held, False
        if not copied:
            return version, 0.0
        seconds = time.perf_counter() - start
        check_loaded(target, version, expected, {"driver": self.host.weights_digest(target)})
        return version, seconds

    def snapshot_to_wire(self, snapshot: WeightsSnapshot) -> dict[str, Any]:
        """A frozen version in wire form (rldag.compute.weights.wire), to save with a checkpoint."""
        return to_wire(snapshot.weights)

    def snapshot_from_wire(self, version: int, weights: dict[str, Any]) -> WeightsSnapshot:
        return WeightsSnapshot(version, from_wire(weights))

    def save_checkpoint(self, node: Node, path: str) -> None:
        self.host.save_checkpoint(node, path)

    def load_checkpoint(self, node: Node, path: str) -> None:
        self.host.load_checkpoint(node, path)

    def export_hf(self, node: Node, path: str) -> None:
        self.host.export_hf(node, path)

    def abandon(self) -> None:
        return None  # a call in this process runs to its end

    def close(self) -> None:
        self.host.close()
