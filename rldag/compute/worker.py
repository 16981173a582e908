"""The pool worker: a Ray actor that hosts the operators of the nodes placed on its worker
group (both roles when training and rollout are colocated) for the whole run."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from rldag.compute.allocator import cap_malloc_arenas
from rldag.compute.dispatch import added_columns, select_rows
from rldag.compute.in_process import (
    checkpointable,
    close_all,
    policy,
    pull_weights,
    streaming,
    version_of,
)
from rldag.compute.log_capture import CapturedLogs
from rldag.compute.weights.broadcast import WeightGroup
from rldag.compute.weights.wire import from_wire, to_wire
from rldag.graph.dag import Node
from rldag.graph.operator import NodeContext, OperatorInstance


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class PoolWorker:
    """Rank `rank` of a worker group; builds each node's operator on first use."""

    def __init__(self, group: str, rank: int, world_size: int) -> None:
        cap_malloc_arenas()  # a long-lived process whose threads come and go (allocator.py)
        self.group, self.rank, self.world_size = group, rank, world_size
        self._instances: dict[str, OperatorInstance] = {}
        self._weight_groups: dict[str, WeightGroup] = {}  # by weights edge
        self._weight_stores: dict[str, Any] = {}  # rank 0: the store it opened, until it joins
        os.environ.update(
            {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank)}
        )

    def rendezvous_address(self) -> tuple[str, int]:
        """This worker's IP and a free port: rank 0's is the group's torch.distributed master."""
        import ray

        return ray.util.get_node_ip_address(), _free_port()

    def set_master(self, addr: str, port: int) -> None:
        os.environ.update({"MASTER_ADDR": addr, "MASTER_PORT": str(port)})

    def info(self) -> dict[str, Any]:
        """Where this worker landed: node, IP, GPU ids, rank and rendezvous settings."""
        import ray

        ctx = ray.get_runtime_context()
        return {
            "group": self.group,
            "rank": self.rank,
            "world_size": self.world_size,
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "master_addr": os.environ.get("MASTER_ADDR", ""),
            "master_port": os.environ.get("MASTER_PORT", ""),
            "pid": os.getpid(),
        }

    def _instance(self, node: Node) -> OperatorInstance:
        if node.name not in self._instances:
            self._instances[node.name] = node.op.factory(node.params)
        return self._instances[node.name]

    def build(self, node: Node) -> None:
        """Build the node's operator now (model loads of all pools overlap at the start)."""
        self._instance(node)

    def run(
        self,
        node: Node,
        inputs: Mapping[str, pa.Table],
        ctx: NodeContext,
        primary: str | None,
        table: pa.Table | None,
        selection: tuple[int, int] | np.ndarray | None,
    ) -> tuple[pa.Table, bool, float, list[dict[str, object]]]:
        """Run the node on its selected rows of the `primary` input `table` (resolved by Ray
        from one shared object). Returns (table, only_added, operator seconds, log records):
        when the output is those rows plus new columns, only the new columns travel back;
        what the operator logged to `rldag.*` is replayed by the driver into the task run."""
        ctx = replace(ctx, rank=self.rank, world_size=self.world_size)
        rows = None if primary is None else select_rows(table, selection)
        with CapturedLogs() as logs:
            begin = time.perf_counter()
            output = self._instance(node)(
                inputs if rows is None else {**inputs, primary: rows}, ctx
            )
            seconds = time.perf_counter() - begin
        added = None if rows is None else added_columns(rows, output)
        if added is not None:
            return output.select(added), True, seconds, logs.records
        return output, False, seconds, logs.records

    def stream(
        self,
        node: Node,
        inputs: Mapping[str, pa.Table],
        ctx: NodeContext,
        primary: str | None,
        table: pa.Table | None,
        selection: tuple[int, int] | np.ndarray | None,
    ) -> Iterator[tuple[pa.Table, float, list[dict[str, object]]]]:
        """A streaming operator's chunks (a Ray streaming generator): (chunk, operator
        seconds, log records) as each chunk is ready."""
        ctx = replace(ctx, rank=self.rank, world_size=self.world_size)
        if primary is not None:
            inputs = {**inputs, primary: select_rows(table, selection)}
        chunks = streaming(self._instance(node)).stream(inputs, ctx)
        while True:
            with CapturedLogs() as logs:
                begin = time.perf_counter()
                chunk = next(chunks, None)
                seconds = time.perf_counter() - begin
            if chunk is None:
                return
            yield chunk, seconds, logs.records

    def policy_version(self, node: Node) -> int:
        return version_of(self._instance(node))

    def export_weights(self, node: Node) -> dict[str, Any]:
        """The node's weights in wire form (numpy buffers the object store holds zero-copy)."""
        return to_wire(policy(self._instance(node)).export_weights())

    def load_weights(self, node: Node, weights: dict[str, Any], version: int) -> float:
        start = time.perf_counter()
        policy(self._instance(node)).load_weights(from_wire(weights), version)
        return time.perf_counter() - start

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
        weights = policy(self._instance(node)).export_weights()
        if edge in self._weight_groups:
            self._weight_groups[edge].send(weights, bucket_bytes)

    def receive_weights(self, node: Node, edge: str, version: int) -> float:
        """Load the weights broadcast over `edge`'s weight group into the node's operator."""
        start = time.perf_counter()
        target = policy(self._instance(node))
        self._weight_groups[edge].receive(lambda weights: target.load_weights(weights, version))
        return time.perf_counter() - start

    def save_checkpoint(self, node: Node, path: str) -> None:
        checkpointable(self._instance(node)).save_checkpoint(path)

    def load_checkpoint(self, node: Node, path: str) -> None:
        checkpointable(self._instance(node)).load_checkpoint(path)

    def export_hf(self, node: Node, path: str) -> None:
        checkpointable(self._instance(node)).export_hf(path)

    def sync_local(self, source: Node, target: Node) -> int:
        """Colocated weights edge: copy in this process when the source is newer."""
        return pull_weights(self._instance(source), self._instance(target))[0]

    def close(self) -> None:
        close_all(self._instances)
        self._instances.clear()
