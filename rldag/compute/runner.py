"""Where nodes run, as the engine sees it: the one narrow seam between the graph and the
compute. `InProcessPools` (rldag.compute.in_process) runs every pool in the driver process;
`RayPools` (rldag.compute.ray_pools) runs worker groups per pool, without touching graph,
scheduler or drivers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from rldag.graph.dag import Node
from rldag.graph.operator import NodeContext


@dataclass(frozen=True)
class WeightsSnapshot:
    """A policy version frozen when its train step finished, for a generate step that runs
    later while training goes on (async.max_staleness > 0)."""

    version: int
    weights: Any  # in-process: a dict of tensor copies; on Ray: an object reference
    pending: tuple[Any, ...] = field(default=())  # Ray: other ranks' gathers to wait for
    digest: str = ""  # the trainer's digest of this version ("" unknown: not checked)


class NodeRunner(Protocol):
    """Runs a node's operator on its pool and moves weights along the weights edge."""

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table: ...

    def stream(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> Iterator[pa.Table]: ...

    def consume(
        self, node: Node, chunks: Iterable[Mapping[str, pa.Table]], ctx: NodeContext
    ) -> pa.Table:
        """Feed a node whose operator is a ChunkConsumer (`OperatorDef.consumes_chunks`)
        each chunk's inputs as they arrive; its one table once they end."""

    def snapshot_weights(self, source: Node) -> WeightsSnapshot: ...

    def sync_weights(
        self, source: Node, target: Node, snapshot: WeightsSnapshot | None = None
    ) -> tuple[int, float]: ...

    def snapshot_to_wire(self, snapshot: WeightsSnapshot) -> dict[str, Any]: ...

    def snapshot_from_wire(self, version: int, weights: dict[str, Any]) -> WeightsSnapshot: ...

    def save_checkpoint(self, node: Node, path: str) -> None: ...

    def load_checkpoint(self, node: Node, path: str) -> None: ...

    def export_hf(self, node: Node, path: str) -> None: ...

    def abandon(self) -> None:
        """Give up what the pools are running now (a stopping run): its calls fail soon and
        nothing is restarted. Work in the driver process cannot be interrupted and ends."""

    def close(self) -> None: ...
