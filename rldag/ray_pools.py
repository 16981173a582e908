"""The pools on Ray: one placement group and one set of PoolWorker actors per worker group,
dispatching tables by prompt group and moving weights along the weights edge.

Edge tables travel as Arrow through Ray's object store (zero-copy reads on a node); nodes
placed on the driver pool run in this process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import pyarrow as pa

from rldag.dispatch import (
    balanced_assignment,
    group_boundaries,
    join_tables,
    reattach,
    select_rows,
)
from rldag.errors import PlacementError
from rldag.graph import Graph, Node
from rldag.log_capture import replay
from rldag.operator import NodeContext
from rldag.pools import InProcessPools, NodeRunner
from rldag.scheduler import Cluster, ClusterNode, Placement, WorkerGroup
from rldag.spec import PipelineSpec, RaySpec
from rldag.worker import PoolWorker

log = logging.getLogger("rldag.pools")
READY_TIMEOUT_S = 120
INLINE_BYTES = 100_000  # Ray passes arguments up to this size inside the call itself


def connect(ray_spec: RaySpec) -> None:
    """Join `ray.address`, or start an embedded local Ray when none is given."""
    import ray

    if ray.is_initialized():
        return
    if ray_spec.address:
        ray.init(address=ray_spec.address, logging_level=logging.WARNING)
    else:
        ray.init(
            num_cpus=ray_spec.num_cpus,
            num_gpus=ray_spec.num_gpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )


def ray_cluster() -> Cluster:
    """The connected Ray cluster's alive nodes and their resources."""
    import ray

    nodes = [
        ClusterNode(
            n["NodeManagerAddress"] + ":" + n["NodeID"][:6],
            n["Resources"].get("CPU", 0),
            n["Resources"].get("GPU", 0),
        )
        for n in ray.nodes()
        if n.get("Alive")
    ]
    return Cluster(tuple(nodes), "Ray cluster")


class RayPools:
    """A NodeRunner over Ray worker groups (see rldag.pools.NodeRunner)."""

    def __init__(self, placement: Placement) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.placement = placement
        self.operator_seconds: dict[str, float] = {}  # last call, slowest worker (for bench/)
        self._driver = InProcessPools()
        self._workers: dict[str, list] = {}
        self._pgs = []
        actor_cls = ray.remote(PoolWorker)
        for group in placement.groups.values():
            pg = placement_group([group.bundle] * group.workers, strategy=group.strategy.value)
            self._pgs.append(pg)
            try:
                ray.get(pg.ready(), timeout=READY_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                raise PlacementError(
                    f"Ray could not reserve {group.workers} x {group.bundle} for pool "
                    f"{group.name} within {READY_TIMEOUT_S}s",
                    path=f"pools.{group.pools[0]}",
                ) from None
            self._workers[group.name] = [
                actor_cls.options(
                    num_cpus=group.cpus,
                    num_gpus=group.gpus,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=i
                    ),
                ).remote(group.name, i, group.workers)
                for i in range(group.workers)
            ]
            addr, port = ray.get(self._workers[group.name][0].rendezvous_address.remote())
            ray.get([w.set_master.remote(addr, port) for w in self._workers[group.name]])

    def workers(self, group: str) -> list:
        """The actor handles of a worker group, by rank."""
        return self._workers[group]

    def _group(self, node: Node) -> WorkerGroup | None:
        return self.placement.group_of(node.name)

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        import ray

        group = self._group(node)
        if group is None:
            out = self._driver.run(node, inputs, ctx)
            self.operator_seconds[node.name] = self._driver.operator_seconds[node.name]
            return out
        workers = self._workers[group.name]
        ports = [p.name for p in node.op.table_ports if p.name in inputs]
        primary = ports[0] if ports else None
        if primary is None:
            out, _, seconds, logs = ray.get(
                workers[0].run.remote(node, dict(inputs), ctx, None, None, None)
            )
            replay(logs)  # operator logs, into this task's run logs
            self.operator_seconds[node.name] = seconds
            return out
        table = inputs[primary]
        rest = {k: v for k, v in inputs.items() if k != primary}
        # One copy into the object store; each worker slices its rows out of it zero-copy
        # (pickling a slice would ship the whole buffers of list columns to every worker).
        # One worker, or a table small enough for Ray to inline in the call, goes as is.
        shared = len(workers) > 1 and table.nbytes > INLINE_BYTES
        ref = ray.put(table) if shared else table
        if node.op.dispatch == "replicate":
            selections: list = [None] * len(workers)
        elif node.op.dispatch == "balanced":
            selections = balanced_assignment(table, len(workers))
        else:
            bounds = group_boundaries(table, len(workers))
            selections = list(zip(bounds[:-1], bounds[1:], strict=True))
        refs = [
            w.run.remote(node, rest, ctx, primary, ref, sel)
            for w, sel in zip(workers, selections, strict=False)
        ]
        results = ray.get(refs)
        for *_, logs in results:
            replay(logs)  # operator logs, into this task's run logs
        self.operator_seconds[node.name] = max(seconds for _, _, seconds, _ in results)
        outputs = [
            reattach(select_rows(table, sel), out) if only_added else out
            for sel, (out, only_added, _, _) in zip(selections, results, strict=False)
        ]
        return outputs[0] if node.op.dispatch == "replicate" else join_tables(outputs)

    def sync_weights(self, source: Node, target: Node) -> tuple[int, float]:
        """Move newer policy weights from `source` to every worker of `target`."""
        import ray

        src_group, dst_group = self._group(source), self._group(target)
        if src_group is None or dst_group is None:
            return self._driver.sync_weights(source, target)
        start = time.perf_counter()
        dst = self._workers[dst_group.name]
        if src_group is dst_group:  # colocated: each worker copies in its own process
            versions = ray.get([w.sync_local.remote(source, target) for w in dst])
            return versions[0], time.perf_counter() - start
        src = self._workers[src_group.name]
        version = ray.get(src[0].policy_version.remote(source))
        if version <= ray.get(dst[0].policy_version.remote(target)):
            return version, 0.0
        # Every rank of a sharded trainer takes part in gathering the weights; rank 0's
        # copy is the one object broadcast by reference to the rollout workers.
        exported = [w.export_weights.remote(source) for w in src]
        ray.get([w.load_weights.remote(target, exported[0], version) for w in dst])
        ray.get(exported[1:])
        return version, time.perf_counter() - start

    def call(self, node: Node, method: str, *args: object) -> object:
        """Call an operator method on every worker of the node's group (collectives such as
        sharded checkpoints need all ranks); returns rank 0's result."""
        import ray

        group = self._group(node)
        if group is None:
            return self._driver.call(node, method, *args)
        return ray.get([w.call.remote(node, method, *args) for w in self._workers[group.name]])[0]

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        self._driver.close()
        for workers in self._workers.values():
            try:
                ray.get([w.close.remote() for w in workers], timeout=30)
            except Exception:  # a dead worker must not block shutdown
                log.warning("a pool worker failed to close cleanly", exc_info=True)
            for w in workers:
                ray.kill(w)
        for pg in self._pgs:
            remove_placement_group(pg)
        self._workers.clear()


def start_pools(spec: PipelineSpec, graph: Graph, where: str = "") -> NodeRunner:
    """The NodeRunner for a run: Ray worker groups, or everything in-process when
    `ray.enabled` is false."""
    from rldag.scheduler import plan_placement

    if not spec.ray.enabled or all(n.pool.value == "driver" for n in graph.nodes.values()):
        return InProcessPools()
    connect(spec.ray)
    return RayPools(plan_placement(spec, graph, ray_cluster(), where))
