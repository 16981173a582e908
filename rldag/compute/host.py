"""The operators of the nodes placed on one process, built on first use and kept for the
run: what the in-process pools (rldag.compute.in_process) and a Ray pool worker
(rldag.compute.worker) both do with them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from rldag.graph.dag import Node
from rldag.graph.operator import (
    AttestsWeights,
    Checkpointable,
    ChunkConsumer,
    Closable,
    NodeContext,
    OperatorInstance,
    PolicyHolder,
    StreamingOperator,
)


def version_of(instance: object) -> int:
    """The policy version an operator holds (0 for operators without weights)."""
    return instance.policy_version if isinstance(instance, PolicyHolder) else 0


def copy_weights(weights: dict[str, Any]) -> dict[str, Any]:
    """Tensors cloned (a frozen version), anything else as is."""
    return {k: v.detach().clone() if hasattr(v, "detach") else v for k, v in weights.items()}


class OperatorHost:
    """Each node's operator instance in this process, and what is done with it."""

    def __init__(self) -> None:
        self._instances: dict[str, OperatorInstance] = {}
        self._building = threading.Lock()

    def instance(self, node: Node) -> OperatorInstance:
        """The node's operator, built on first use, one build at a time: steps run in
        threads, and loading Hugging Face models is not thread-safe (from_pretrained sets a
        process-wide meta-device default while it builds)."""
        with self._building:
            if node.name not in self._instances:
                self._instances[node.name] = node.op.factory(node.params)
            return self._instances[node.name]

    def run(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> tuple[pa.Table, float]:
        """The node's output table and the seconds its operator took (built before)."""
        instance = self.instance(node)
        start = time.perf_counter()
        out = instance(inputs, ctx)
        return out, time.perf_counter() - start

    def stream(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> Iterator[tuple[pa.Table, float]]:
        """A streaming operator's chunks, each with the seconds it took to make."""
        instance = self.instance(node)
        if not isinstance(instance, StreamingOperator):
            raise TypeError(f"{type(instance).__name__} does not stream (StreamingOperator)")
        chunks = instance.stream(inputs, ctx)
        while True:
            start = time.perf_counter()
            chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk, time.perf_counter() - start

    def consumer(self, node: Node) -> ChunkConsumer:
        """The node's operator as a ChunkConsumer (fed its input chunk by chunk)."""
        instance = self.instance(node)
        if not isinstance(instance, ChunkConsumer):
            raise TypeError(f"{type(instance).__name__} takes no chunks (ChunkConsumer)")
        return instance

    def consume(
        self, node: Node, chunks: Iterable[Mapping[str, pa.Table]], ctx: NodeContext
    ) -> tuple[pa.Table, float]:
        """Feed a ChunkConsumer each chunk's inputs as they arrive; its table and the
        seconds it worked (not counting the waits for chunks)."""
        consumer, seconds = self.consumer(node), 0.0
        for inputs in chunks:
            start = time.perf_counter()
            consumer.consume(inputs, ctx)
            seconds += time.perf_counter() - start
        start = time.perf_counter()
        out = consumer.finish(ctx)
        return out, seconds + time.perf_counter() - start

    def policy(self, node: Node) -> PolicyHolder:
        """The node's operator as the holder of policy weights."""
        instance = self.instance(node)
        if not isinstance(instance, PolicyHolder):
            raise TypeError(f"{type(instance).__name__} holds no policy weights (PolicyHolder)")
        return instance

    def policy_version(self, node: Node) -> int:
        return version_of(self.instance(node))

    def export_weights(self, node: Node) -> dict[str, Any]:
        """The node's full policy weights (tensors)."""
        return self.policy(node).export_weights()

    def load_weights(self, node: Node, weights: dict[str, Any], version: int) -> None:
        self.policy(node).load_weights(weights, version)

    def weights_digest(self, node: Node) -> str:
        """The digest of the weights the node's operator holds ("" when it cannot tell)."""
        instance = self.instance(node)
        return instance.weights_digest() if isinstance(instance, AttestsWeights) else ""

    def pull_weights(self, source: Node, target: Node) -> tuple[int, bool]:
        """Copy `source`'s policy into `target` when it is newer (a weights edge inside this
        process); (the version `target` holds, whether it was copied)."""
        version, held = self.policy_version(source), self.policy_version(target)
        if version <= held:
            return held, False
        self.load_weights(target, self.export_weights(source), version)
        return version, True

    def _checkpointable(self, node: Node) -> Checkpointable:
        instance = self.instance(node)
        if not isinstance(instance, Checkpointable):
            raise TypeError(f"{type(instance).__name__} is not Checkpointable")
        return instance

    def save_checkpoint(self, node: Node, path: str) -> None:
        self._checkpointable(node).save_checkpoint(path)

    def load_checkpoint(self, node: Node, path: str) -> None:
        self._checkpointable(node).load_checkpoint(path)

    def export_hf(self, node: Node, path: str) -> None:
        self._checkpointable(node).export_hf(path)

    def close(self) -> None:
        """Release what the operators hold."""
        with self._building:
            instances = list(self._instances.values())
            self._instances.clear()
        for instance in instances:
            if isinstance(instance, Closable):
                instance.close()
