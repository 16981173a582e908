"""The pools on Ray: one placement group and one set of PoolWorker actors per worker group,
dispatching tables by prompt group and moving weights along the weights edge.

Edge tables travel as Arrow through Ray's object store (zero-copy reads on a node); nodes
placed on the driver pool run in this process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from rldag.compute.cluster import connect, ray_cluster, same_machines
from rldag.compute.dispatch import (
    balanced_assignment,
    group_boundaries,
    join_tables,
    reattach,
    select_rows,
)
from rldag.compute.handles import WorkerHandle, start_worker
from rldag.compute.in_process import InProcessPools
from rldag.compute.log_capture import replay
from rldag.compute.placement import Placement, WorkerGroup, plan_placement
from rldag.compute.runner import NodeRunner, WeightsSnapshot
from rldag.compute.weights.attest import attest_group, trainer_digest
from rldag.compute.weights.edges import BroadcastEdges
from rldag.compute.worker import ChunkReply, RunReply
from rldag.compute.worker_calls import WorkerCalls
from rldag.config.errors import PlacementError
from rldag.config.faults import FaultsSpec
from rldag.config.spec import PipelineSpec, PoolName
from rldag.config.weights import WeightsSpec
from rldag.graph.dag import Graph, Node
from rldag.graph.operator import NodeContext, PoolReservation

log = logging.getLogger("rldag.pools")
READY_TIMEOUT_S = 120
INLINE_BYTES = 100_000  # Ray passes arguments up to this size inside the call itself


class RayPools:
    """A NodeRunner over Ray worker groups (see rldag.compute.runner.NodeRunner)."""

    def __init__(
        self,
        placement: Placement,
        weights: WeightsSpec | None = None,
        faults: FaultsSpec | None = None,
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group

        self.placement = placement
        self.calls = WorkerCalls(faults or FaultsSpec(), self._spawn)
        self._workers = self.calls.workers  # by group, by rank
        self.operator_seconds: dict[str, float] = {}  # last call, slowest worker (for bench/)
        self._driver = InProcessPools()
        self._edges = BroadcastEdges(weights or WeightsSpec())  # split weights edges
        self._reservations: dict[str, PoolReservation] = {}  # by group: lent to companions
        self._pgs: dict[str, Any] = {}
        for group in placement.groups.values():
            pg = placement_group([group.bundle] * group.workers, strategy=group.strategy.value)
            self._pgs[group.name] = pg
            try:
                ray.get(pg.ready(), timeout=READY_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                raise PlacementError(
                    f"Ray could not reserve {group.workers} x {group.bundle} for pool "
                    f"{group.name} within {READY_TIMEOUT_S}s",
                    path=f"pools.{group.pools[0]}",
                ) from None
            self._reservations[group.name] = PoolReservation(
                group.name, pg, group.workers, 0.0 if group.nodes else group.cpus,
                group.max_concurrency,
            )  # fmt: skip
            if not group.nodes:  # only other nodes' own actors live here
                continue
            self._workers[group.name] = [self._spawn(group, i) for i in range(group.workers)]
            workers = self._workers[group.name]
            what = f"pool worker group {group.name}: its rendezvous"
            addr, port = self.calls.get(workers[0].rendezvous_address.remote(), what)
            timeout = self.calls.timeout_s  # of the trainer's own collectives too
            self.calls.get([w.set_master.remote(addr, port, timeout) for w in workers], what)

    def _spawn(self, group: WorkerGroup, rank: int) -> WorkerHandle:
        """The worker actor of `rank` in its bundle of the group's placement group."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(
            self._pgs[group.name], placement_group_bundle_index=rank
        )
        return start_worker(group, rank, strategy)

    def build_all(self, graph: Graph) -> None:
        """Start building every pool node's operator on all its workers at once, without
        waiting: the first call of a node queues behind its build on the same actor, and
        the rollout engine and the trainer load their models in parallel."""
        for node in graph.nodes.values():
            group = self._group(node)
            if group is not None:
                if node.op.stateful:
                    self.calls.stateful.add(group.name)
                for w in self._workers[group.name]:
                    w.build.remote(node)

    def workers(self, group: str) -> list[WorkerHandle]:
        """The actor handles of a worker group, by rank."""
        return self._workers[group]

    def _group(self, node: Node) -> WorkerGroup | None:
        return self.placement.group_of(node.name)

    def _lend(self, node: Node, ctx: NodeContext) -> NodeContext:
        """`ctx` with the reservation of the node's companion pool (if it has one)."""
        for name, group in self.placement.groups.items():
            if node.name in group.companions:
                return replace(ctx, companion=self._reservations[name])
        return ctx

    def _dispatch(
        self, node: Node, inputs: Mapping[str, pa.Table]
    ) -> tuple[list[WorkerHandle], str | None, pa.Table | None, dict[str, pa.Table], list, object]:
        """Workers, primary port, its table, the other inputs, each worker's selection of
        rows and what to send as the primary table (one object-store copy when shared)."""
        import ray

        workers = self._workers[self._group(node).name]
        ports = [p.name for p in node.op.table_ports if p.name in inputs]
        primary = ports[0] if ports else None
        if primary is None:
            return workers[:1], None, None, dict(inputs), [None], None
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
        return workers, primary, table, rest, selections, ref

    def run(self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:

        if self._group(node) is None:
            out = self._driver.run(node, inputs, ctx)
            self.operator_seconds[node.name] = self._driver.operator_seconds[node.name]
            return out
        workers, primary, table, rest, selections, ref = self._dispatch(node, inputs)
        ctx = self._lend(node, ctx)
        calls = [
            lambda w, sel=sel: w.run.remote(node, rest, ctx, primary, ref, sel)
            for sel in selections[: len(workers)]
        ]
        results: list[RunReply] = self._gather(node, calls)
        for reply in results:
            replay(reply.logs)  # operator logs, into this task's run logs
        self.operator_seconds[node.name] = max(reply.seconds for reply in results)
        if primary is None:
            return results[0].table
        outputs = [
            reattach(select_rows(table, sel), reply.table) if reply.only_added else reply.table
            for sel, reply in zip(selections, results, strict=False)
        ]
        return outputs[0] if node.op.dispatch == "replicate" else join_tables(outputs)

    def _gather(self, node: Node, calls: list[Callable[[WorkerHandle], Any]]) -> list:
        return self.calls.gather(node.name, self._group(node), calls)

    def stream(
        self, node: Node, inputs: Mapping[str, pa.Table], ctx: NodeContext
    ) -> Iterator[pa.Table]:
        """A streaming operator's chunks from every worker of its group, as each is ready
        (Ray streaming generators; chunks of different workers interleave)."""
        import ray

        if self._group(node) is None:
            yield from self._driver.stream(node, inputs, ctx)
            return
        workers, primary, _, rest, selections, ref = self._dispatch(node, inputs)
        ctx = self._lend(node, ctx)
        streams = [
            w.stream.options(num_returns="streaming").remote(node, rest, ctx, primary, ref, sel)
            for w, sel in zip(workers, selections, strict=False)
        ]
        seconds = [0.0] * len(streams)
        live = {gen: k for k, gen in enumerate(streams)}
        deadline = self.calls.deadline()
        while live:
            left = max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(live), num_returns=1, timeout=left)
            if not ready:
                raise self.calls.late(self._group(node), sorted(live.values()))
            gen = ready[0]
            try:
                reply: ChunkReply = ray.get(next(gen))
            except StopIteration:
                del live[gen]
                continue
            replay(reply.logs)
            seconds[live[gen]] += reply.seconds
            yield reply.table
        self.operator_seconds[node.name] = max(seconds)

    def consume(
        self, node: Node, chunks: Iterable[Mapping[str, pa.Table]], ctx: NodeContext
    ) -> pa.Table:
        """A ChunkConsumer's table: each chunk goes to its one worker as it arrives (a trainer
        of several ranks waits for its whole batch: rldag.graph.streaming)."""
        if self._group(node) is None:
            return self._driver.consume(node, chunks, ctx)
        ctx, replies = self._lend(node, ctx), []
        for inputs in chunks:
            replies += self._gather(node, [lambda w, i=inputs: w.consume.remote(node, i, ctx)])
        replies += self._gather(node, [lambda w: w.finish.remote(node, ctx)])
        for reply in replies:
            replay(reply.logs)
        self.operator_seconds[node.name] = sum(reply.seconds for reply in replies)
        return replies[-1].table

    def snapshot_weights(self, source: Node) -> WeightsSnapshot:
        """The trainer's weights now, held in the object store (every rank gathers)."""

        src = self._workers[self._group(source).name]
        version = self.calls.get(src[0].policy_version.remote(source), f"{source.name}'s version")
        exported = [w.export_weights.remote(source) for w in src]
        digest = trainer_digest(src, source, self.calls.get)
        self.calls.wait(exported, f"{source.name}'s weights")  # not fetched here
        return WeightsSnapshot(version, exported[0], tuple(exported[1:]), digest)

    def sync_weights(
        self, source: Node, target: Node, snapshot: WeightsSnapshot | None = None
    ) -> tuple[int, float]:
        """Bring every worker of `target` to `snapshot` (or to `source`'s current weights)
        when it is newer; returns the version and the seconds it took."""

        src_group, dst_group = self._group(source), self._group(target)
        if src_group is None or dst_group is None:
            if snapshot is not None and dst_group is None:
                return self._driver.sync_weights(source, target, snapshot)
            return self._driver.sync_weights(source, target)
        start = time.perf_counter()
        dst = self._workers[dst_group.name]
        if snapshot is None and src_group is dst_group:  # colocated: a copy in each worker
            held = self.calls.get(dst[0].policy_version.remote(target), f"{target.name}'s version")
            synced = [w.sync_local.remote(source, target) for w in dst]
            versions = self.calls.get(synced, f"{target.name}'s weights from {source.name}")
            seconds = time.perf_counter() - start
            if versions[0] > held:
                get = self.calls.get
                attest_group(
                    dst_group.name, dst, target, versions[0], trainer_digest(dst, source, get), get
                )
            return versions[0], seconds
        if snapshot is None:  # the trainer's weights now (k = 0)
            src = self._workers[src_group.name]
            # One round; every trainer rank is asked: a sharded trainer's ranks build their
            # operator together (its process group needs them all).
            *versions, held = self.calls.get(
                [w.policy_version.remote(source) for w in src]
                + [dst[0].policy_version.remote(target)],
                f"the versions of {source.name} and {target.name}",
            )
            if versions[0] <= held:
                return held, 0.0
            edge = f"{src_group.name}->{dst_group.name}"
            if self._edges.usable(edge, src, dst):  # its broadcast group forms on first use
                self._edges.sync(edge, src, dst, source, target, versions[0])
                seconds = time.perf_counter() - start
                get = self.calls.get
                digest = trainer_digest(src, source, get)
                attest_group(dst_group.name, dst, target, versions[0], digest, get)
                return versions[0], seconds
            snapshot = self.snapshot_weights(source)
        else:
            held = self.calls.get(dst[0].policy_version.remote(target), f"{target.name}'s version")
        if snapshot.version <= held:
            return held, 0.0
        # Rank 0's gathered copy is the one object broadcast by reference to the workers.
        loads = [w.load_weights.remote(target, snapshot.weights, snapshot.version) for w in dst]
        self.calls.get(loads, f"{target.name}'s weights (version {snapshot.version})")
        seconds = time.perf_counter() - start
        attest_group(dst_group.name, dst, target, snapshot.version, snapshot.digest, self.calls.get)
        return snapshot.version, seconds

    def snapshot_to_wire(self, snapshot: WeightsSnapshot) -> dict[str, Any]:
        import ray

        if not hasattr(snapshot.weights, "hex"):  # not an object ref: an in-driver snapshot
            return self._driver.snapshot_to_wire(snapshot)
        return ray.get(snapshot.weights)

    def snapshot_from_wire(self, version: int, weights: dict[str, Any]) -> WeightsSnapshot:
        import ray

        return WeightsSnapshot(version, ray.put(weights))

    def _on_every_rank(self, node: Node, call: Callable[[WorkerHandle], Any], what: str) -> None:
        """`call(worker)` (returning an object ref) on every worker of the node's group:
        sharded checkpoints need all ranks."""
        refs = [call(w) for w in self._workers[self._group(node).name]]
        self.calls.get(refs, f"{node.name}'s {what}")

    def save_checkpoint(self, node: Node, path: str) -> None:
        if self._group(node) is None:
            return self._driver.save_checkpoint(node, path)
        self._on_every_rank(node, lambda w: w.save_checkpoint.remote(node, path), "checkpoint")

    def load_checkpoint(self, node: Node, path: str) -> None:
        if self._group(node) is None:
            return self._driver.load_checkpoint(node, path)
        self._on_every_rank(node, lambda w: w.load_checkpoint.remote(node, path), "checkpoint load")

    def export_hf(self, node: Node, path: str) -> None:
        if self._group(node) is None:
            return self._driver.export_hf(node, path)
        self._on_every_rank(node, lambda w: w.export_hf.remote(node, path), "HF export")

    def abandon(self) -> None:
        """Kill every pool worker now, busy or not (a call queued behind a busy one would
        wait for it); their calls in flight fail and none is replaced. The processes they
        started go with them (rollout servers watch their parent's pid, sandboxes their
        control pipe)."""
        import ray

        self.calls.abandoned = True
        for workers in self._workers.values():
            for w in workers:
                ray.kill(w, no_restart=True)
        self._workers.clear()

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
        for pg in self._pgs.values():
            remove_placement_group(pg)
        self._workers.clear()
        self._pgs.clear()


def start_pools(
    spec: PipelineSpec,
    graph: Graph,
    where: str = "",
    placement: Placement | None = None,
    starting: Callable[[str], object] = lambda what: None,
) -> NodeRunner:
    """The NodeRunner for a run: Ray worker groups, or everything in-process when
    `ray.enabled` is false. A `placement` already planned (by `rldag run`, on the cluster it
    expected) is used when Ray's cluster has the same machines; else it is planned again.
    `starting` is told what it is doing (the run's Starting events)."""
    if not spec.ray.enabled or all(n.pool == PoolName.driver for n in graph.nodes.values()):
        return InProcessPools()
    starting(f"connecting to Ray at {spec.ray.address}" if spec.ray.address else "starting Ray")
    connect(spec.ray)
    cluster = ray_cluster()
    if placement is not None and same_machines(placement.cluster, cluster):
        placement = replace(placement, cluster=cluster)
    else:
        if placement is not None:
            why = f"planned on {placement.cluster.describe()}, Ray has {cluster.describe()}"
            log.info("placing the pools again: %s", why)
        placement = plan_placement(spec, graph, cluster, where)
    groups = ", ".join(f"{g.name} x{g.workers}" for g in placement.groups.values())
    starting(f"building workers ({groups}) and loading their models")
    pools = RayPools(placement, spec.weights, spec.faults)
    pools.build_all(graph)
    return pools
