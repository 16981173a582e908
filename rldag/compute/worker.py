"""The pool worker: a Ray actor that hosts the operators of the nodes placed on its worker
group (both roles when training and rollout are colocated) for the whole run, over one
OperatorHost. What is Ray's own stays here: rank and rendezvous, the rows a rank runs,
replies that carry only new columns, captured logs, weight groups and the wire format.
Called through the typed handles of rldag.compute.handles."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from rldag.compute.allocator import cap_malloc_arenas
from rldag.compute.dispatch import added_columns, select_rows
from rldag.compute.host import OperatorHost
from rldag.compute.log_capture import CapturedLogs
from rldag.compute.weights.broadcast import WeightGroup
from rldag.compute.weights.wire import from_wire, to_wire
from rldag.config.faults import COLLECTIVE_TIMEOUT
from rldag.graph.dag import Node
from rldag.graph.operator import NodeContext

Selection = tuple[int, int] | np.ndarray | None  # a rank's rows: a range, indices, or all


class RunReply(NamedTuple):
    """A rank's result of `PoolWorker.run`."""

    table: pa.Table  # the output, or only its new columns when `only_added`
    only_added: bool  # the output was the selected rows plus these columns
    seconds: float  # operator seconds
    logs: list[dict[str, object]]  # what the operator logged to `rldag.*`, to replay


class ChunkReply(NamedTuple):
    """One chunk of `PoolWorker.stream`."""

    table: pa.Table
    seconds: float  # operator seconds to make it
    logs: list[dict[str, object]]


class ConsumeReply(NamedTuple):
    """A rank's result of `PoolWorker.consume`: it took one chunk."""

    seconds: float
    logs: list[dict[str, object]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class PoolWorker:
    """Rank `rank` of a worker group; builds each node's operator on first use."""

    def __init__(self, group: str, rank: int, world_size: int) -> None:
        cap_malloc_arenas()  # a long-lived process whose threads come and go (allocator.py)
        self.group, self.rank, self.world_size = group, rank, world_size
        self.host = OperatorHost()
        self._weight_groups: dict[str, WeightGroup] = {}  # by weights edge
        self._weight_stores: dict[str, Any] = {}  # rank 0: the store it opened, until it joins
        os.environ.update(
            {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank)}
        )

    def rendezvous_address(self) -> tuple[str, int]:
        """This worker's IP and a free port: rank 0's is the group's torch.distributed master."""
        import ray

        return ray.util.get_node_ip_address(), _free_port()

    def set_master(self, addr: str, port: int, timeout_s: float) -> None:
        """The group's torch.distributed master, and the timeout of its collectives."""
        os.environ.update(
            {"MASTER_ADDR": addr, "MASTER_PORT": str(port), COLLECTIVE_TIMEOUT: f"{timeout_s:g}"}
        )

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()

    def build(self, node: Node) -> None:
        """Build the node's operator now (model loads of all pools overlap at the start)."""
        self.host.instance(node)

    def run(
        self,
        node: Node,
        inputs: Mapping[str, pa.Table],
        ctx: NodeContext,
        primary: str | None,
        table: pa.Table | None,
        selection: Selection,
    ) -> RunReply:
        """Run the node on its selected rows of the `primary` input `table` (resolved by Ray
        from one shared object). When the output is those rows plus new columns, only the
        new columns travel back; what the operator logged to `rldag.*` is replayed by the
        driver into the task run."""
        ctx = replace(ctx, rank=self.rank, world_size=self.world_size)
        rows = None if primary is None else select_rows(table, selection)
        with CapturedLogs() as logs:
            output, seconds = self.host.run(
                node, inputs if rows is None else {**inputs, primary: rows}, ctx
            )
        added = None if rows is None else added_columns(rows, output)
        if added is not None:
            return RunReply(output.select(added), True, seconds, logs.records)
        return RunReply(output, False, seconds, logs.records)

    def stream(
        self,
        node: Node,
        inputs: Mapping[str, pa.Table],
        ctx: NodeContext,
        primary: str | None,
        table: pa.Table | None,
        selection: Selection,
    ) -> Iterator[ChunkReply]:
        """A streaming operator's chunks (a Ray streaming generator), each as it is ready."""
        ctx = replace(ctx, rank=self.rank, world_size=self.world_size)
        if primary is not None:
            inputs = {**inputs, primary: select_rows(table, selection)}
        chunks = self.host.stream(node, inputs, ctx)
        while True:
            with CapturedLogs() as logs:
                made = next(chunks, None)
            if made is None:
                return
            yield ChunkReply(*made, logs.records)

    def consume(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> ConsumeReply:
        """Feed one chunk's inputs to the node's ChunkConsumer (a Ray actor runs its calls
        in order: `finish` comes after every chunk)."""
        ctx = replace(ctx, rank=self.rank, world_size=self.world_size)
        with CapturedLogs() as logs:
            start = time.perf_counter()
            self.host.consumer(node).consume(inputs, ctx)
        return ConsumeReply(time.perf_counter() - start, logs.records)

    def finish(self, node: Node, ctx: NodeContext) -> RunReply:
        """The ChunkConsumer's table once every chunk was fed."""
        ctx = replace(ctx, rank=self.rank, world_size=self.world_size)
        with CapturedLogs() as logs:
            start = time.perf_counter()
            out = self.host.consumer(node).finish(ctx)
        return RunReply(out, False, time.perf_counter() - start, logs.records)

    def policy_version(self, node: Node) -> int:
        return self.host.policy_version(node)

    def export_weights(self, node: Node) -> dict[str, Any]:
        """The node's weights in wire form (numpy buffers the object store holds zero-copy)."""
        return to_wire(self.host.export_weights(node))

    def load_weights(self, node: Node, weights: dict[str, Any], version: int) -> float:
        start = time.perf_counter()
        self.host.load_weights(node, from_wire(weights), version)
        return time.perf_counter() - start

    def weights_digest(self, node: Node) -> str:
        """The digest of the weights the node's operator holds (a trainer's: every rank
        calls it, as export_weights)."""
        return self.host.weights_digest(node)

    def sync_local(self, source: Node, target: Node) -> int:
        """Colocated weights edge: copy in this process when the source is newer."""
        return self.host.pull_weights(source, target)[0]

    def weight_device(self) -> str:
        """The UUID of the GPU this worker's weight group would use ("" without CUDA)."""
        import torch

        return str(torch.cuda.get_device_properties(0).uuid) if torch.cuda.is_available() else ""

    def open_weight_group(self, edge: str, timeout_s: float) -> tuple[str, int]:
        """Rank 0 of the weight group of `edge`: listen for its members at (ip, port)."""
        ip = self.rendezvous_address()[0]
        self._weight_stores[edge], port = WeightGroup.open_store(ip, timeout_s)
        return ip, port

    def join_weight_group(
        self, edge: str, host: str, port: int, rank: int, size: int, backend: str, timeout_s: float
    ) -> None:
        store = self._weight_stores.pop(edge, None)
        self._weight_groups[edge] = WeightGroup.join(
            host, port, rank, size, backend, timeout_s, store
        )

    def send_weights(self, node: Node, edge: str, bucket_bytes: int) -> None:
        """Gather the node's full weights (every rank of a sharded trainer calls this); the
        member of `edge`'s weight group broadcasts them."""
        weights = self.host.export_weights(node)
        if edge in self._weight_groups:
            self._weight_groups[edge].send(weights, bucket_bytes)

    def receive_weights(self, node: Node, edge: str, version: int) -> float:
        """Load the weights broadcast over `edge`'s weight group into the node's operator."""
        start = time.perf_counter()
        target = self.host.policy(node)
        self._weight_groups[edge].receive(lambda weights: target.load_weights(weights, version))
        return time.perf_counter() - start

    def save_checkpoint(self, node: Node, path: str) -> None:
        self.host.save_checkpoint(node, path)

    def load_checkpoint(self, node: Node, path: str) -> None:
        self.host.load_checkpoint(node, path)

    def export_hf(self, node: Node, path: str) -> None:
        self.host.export_hf(node, path)

    def close(self) -> None:
        self.host.close()
