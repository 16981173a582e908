"""One run of a pipeline, independent of the orchestrator: executes one step (a node of an
iteration) on its pool, chunk by chunk where the node streams, persists its table and
closes an iteration with its metrics.

The driver (rldag.engine.driver; its launchers: inline, or Prefect in flows.rl_loop) calls
`open_step` when the scheduler starts a step and `execute` with the handles of its inputs.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from rldag.compute.placement import Placement
from rldag.compute.runner import NodeRunner, WeightsSnapshot
from rldag.config.errors import InputError, RunError, describe
from rldag.config.spec import AsyncMode, LoadedPipeline
from rldag.engine import checkpoints
from rldag.engine.events import NodeFinished, NodeStarted, Starting, emit
from rldag.engine.metrics import iteration_metrics
from rldag.engine.refill import Refill
from rldag.engine.scheduler import Step, emits_chunks, weights_version
from rldag.engine.stop import StopRequest
from rldag.engine.streams import EdgeStream
from rldag.graph.dag import Graph, Node
from rldag.graph.operator import NodeContext
from rldag.graph.schema import check_table
from rldag.storage.kill_points import kill_point
from rldag.storage.run_lock import RunLock, claim_new_run
from rldag.storage.store import Storage, new_run_id, open_storage

log = logging.getLogger("rldag.run")


def _starting(what: str) -> None:
    emit(Starting(what))


@dataclass(frozen=True)
class EdgeHandle:
    """What an orchestrator passes between steps: which run, iteration and node, and, once
    the step has finished, where its table is stored and how big it is (never the rows)."""

    run_id: str
    iteration: int
    node: str
    uri: str = ""  # "" while streaming, or when the node does not persist
    rows: int = -1  # -1 while the step is still running
    bytes: int = 0
    columns: tuple[str, ...] = ()

    @property
    def step(self) -> Step:
        return Step(self.iteration, self.node)


@dataclass
class Run:
    """The state of one run: graph, storage, pools, the streams of the steps in flight,
    frozen policy versions (k > 0) and the metrics."""

    loaded: LoadedPipeline
    graph: Graph
    storage: Storage
    run_id: str
    runner: NodeRunner
    metrics: list[dict[str, float]] = field(default_factory=list)
    snapshots: dict[int, WeightsSnapshot] = field(default_factory=dict)  # version -> weights
    _streams: dict[Step, EdgeStream] = field(default_factory=dict)
    _seconds: dict[Step, float] = field(default_factory=dict)
    _sync_s: dict[int, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _continuous_sync: threading.Lock = field(default_factory=threading.Lock)
    _served: dict[str, int] = field(default_factory=dict)  # continuous: version per generate
    _writer: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="rldag-persist")
    )
    _pending: dict[int, list[tuple[str, Future]]] = field(default_factory=dict)
    lock: RunLock | None = None  # this process's hold on the run directory (rldag.storage.run_lock)
    stop: StopRequest = field(default_factory=StopRequest)  # set by a signal or a cancel
    refill: Refill = field(init=False)  # the refill rounds (rldag.engine.refill)

    def __post_init__(self) -> None:
        self.refill = Refill.of(self.graph)

    @classmethod
    def start(
        cls,
        loaded: LoadedPipeline,
        graph: Graph,
        runner: NodeRunner | None = None,
        run_id: str | None = None,
        placement: Placement | None = None,
        stop: StopRequest | None = None,
    ) -> Run:
        """Create the run directory with the resolved pipeline; with `run_id`, reopen that
        stored run (to resume it). Without a `runner`, start the pools (on `placement` when
        one was planned already: rldag.compute.ray_pools.start_pools). `stop`: the request a
        signal handler or a cancel watcher sets (the driver honours it)."""
        storage = open_storage(loaded.spec.storage, loaded.spec.faults)
        lease_s = loaded.spec.storage.lock_lease_s
        if run_id is None:
            lock = claim_new_run(storage, lambda: new_run_id(loaded.spec.name), lease_s)
        elif not storage.exists(f"{run_id}/pipeline.yaml"):
            raise InputError(f"no run {run_id!r} under {storage.root}", path="--resume")
        else:
            lock = RunLock(storage, run_id, lease_s)
            lock.acquire()  # refused while another process runs it
            if left := storage.remove_temporaries(run_id):  # a killed process's half-writes
                log.info("run %s: removed %d temporary files: %s", run_id, len(left), left)
        emit(Starting("claimed the run directory", lock.run_id, storage.uri(lock.run_id)))
        try:
            if runner is None:
                from rldag.compute.ray_pools import start_pools

                runner = start_pools(
                    loaded.spec, graph, loaded.source, placement, starting=_starting
                )
            run = cls(loaded, graph, storage, lock.run_id, runner, lock=lock)
            run.stop = stop or run.stop
            storage.write_text(f"{run.run_id}/pipeline.yaml", loaded.resolved_yaml)
        except BaseException:
            lock.release()
            raise
        return run

    @property
    def uri(self) -> str:
        return self.storage.uri(self.run_id)

    @property
    def max_staleness(self) -> int:
        return self.loaded.spec.async_.max_staleness

    def _persists(self, name: str) -> bool:
        node = self.graph.nodes[name].spec
        return self.loaded.spec.storage.persist if node.persist is None else node.persist

    def open_step(self, step: Step) -> EdgeHandle:
        """Make the step's output stream (consumers may read it from now on)."""
        with self._lock:
            self._streams[step] = EdgeStream()
        return EdgeHandle(self.run_id, step.iteration, step.node)

    def stop_streams(self) -> None:
        """End every stream still open with a failure, so that no reader waits for a producer
        that will not finish (the run is stopping: a step failed)."""
        stopped = RunError("the run stopped before this input was complete")
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.close(stopped)

    def stream(self, handle: EdgeHandle) -> EdgeStream:
        return self._streams[handle.step]

    def execute(self, step: Step, inputs: Mapping[str, EdgeHandle]) -> EdgeHandle:
        """Run `step` on its pool over its input handles (port -> upstream handle); persist
        and return its handle. A node that runs per chunk starts on the first chunk of a
        streaming input; a generate node emits chunks as its prompt groups finish."""
        node = self.graph.nodes[step.node]
        out = self._streams[step]
        start = time.perf_counter()
        try:
            emit(NodeStarted(self.run_id, step.iteration, step.node))
            self._sync_weights(step, node)
            streams = {p: self.stream(h) for p, h in inputs.items()}
            if self.refill.refills(step.node):  # rldag.engine.refill
                self.refill.produce(self, step, node, streams, out)
            else:
                self._produce(step, node, streams, out)
            if not out.chunks:
                raise ValueError("it emitted no table")
            out.close()
            self._after_train(step, node)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # also libraries' BaseExceptions (torch DCP's)
            out.close(err)
            where = f"node '{node.name}' (iteration {step.iteration})"
            raise RunError(f"{where} failed: {describe(err)}") from err
        table = out.table()
        seconds = time.perf_counter() - start
        handle = self._persist(step, table)
        with self._lock:
            self._seconds[step] = seconds
        rows, chunks = table.num_rows, out.chunks
        emit(NodeFinished(self.run_id, step.iteration, step.node, rows, seconds, chunks))
        return handle

    @property
    def continuous(self) -> bool:
        """Whether generate steps of consecutive iterations overlap (async.mode continuous)."""
        return self.max_staleness > 0 and self.loaded.spec.async_.mode is AsyncMode.continuous

    def _ctx(self, step: Step) -> NodeContext:
        spec = self.loaded.spec
        continuous = self.continuous and self.graph.nodes[step.node].op.continuous
        chunks = spec.async_.chunk_groups
        draw = self.refill.draw(step, self.graph.nodes[step.node], self.metrics)
        return NodeContext(
            step.node,
            step.iteration,
            spec.seed,
            self.uri,
            chunk_groups=chunks,
            continuous=continuous,
            round=step.round,
            draw=draw,
        )

    def _produce(
        self, step: Step, node: Node, inputs: Mapping[str, EdgeStream], out: EdgeStream
    ) -> None:
        ctx = self._ctx(step)
        ports = [p.name for p in node.op.table_ports if p.name in inputs]
        primary = ports[0] if ports else None
        chunked = (
            self.loaded.spec.async_.chunk_groups > 0
            and node.op.streams
            and primary is not None
            and emits_chunks(self.graph.nodes[node.inputs[primary]])
        )
        whole = {p: s.table() for p, s in inputs.items() if not (chunked and p == primary)}
        if chunked and node.op.consumes_chunks:  # a trainer: its steps start on the first chunks
            chunks = ({**whole, primary: chunk} for chunk in inputs[primary])
            out.append(self._checked(node, self.runner.consume(node, chunks, ctx)))
        elif chunked:
            for chunk in inputs[primary]:
                table = self.runner.run(node, {**whole, primary: chunk}, ctx)
                out.append(self._checked(node, table))
                kill_point("stream_chunk", f"{step}")
        elif node.op.emits_chunks:
            for chunk in self.runner.stream(node, whole, ctx):
                out.append(self._checked(node, chunk))
                kill_point("stream_chunk", f"{step}")
        else:
            out.append(self._checked(node, self.runner.run(node, whole, ctx)))

    def _checked(self, node: Node, table: pa.Table) -> pa.Table:
        problems = check_table(table, {f.name: f.type for f in node.output}, node.name)
        if problems:
            raise ValueError(f"it returned a table that breaks its schema: {problems}")
        return table

    def _sync_weights(self, step: Step, node: Node) -> None:
        """Before a generate step: load the policy version the staleness bound names (the
        trainer's current one when k = 0)."""
        if node.weights_from is None:
            return
        if self.continuous:
            with self._continuous_sync:  # loads of overlapping steps never go back a version
                self._sync_newest(step, node)
            return
        source = self.graph.nodes[node.weights_from]
        snapshot = None
        if self.max_staleness:
            version = weights_version(step.iteration, self.max_staleness)
            snapshot = self.snapshots.get(version)
            if snapshot is None:
                if version > 0:
                    raise RuntimeError(f"policy version {version} was not kept for it")
                return  # the rollout engine starts on the initial policy, version 0
        self._sync(step, source, node, snapshot)

    def _sync_newest(self, step: Step, node: Node) -> None:
        """Continuous mode: load the newest policy version, if the engine serves an older
        one; its running sequences go on under it (partial rollouts). The newest is at least
        the one the staleness bound names: iteration i opened once version i - k existed."""
        with self._lock:
            newest = max(self.snapshots, default=0)
            snapshot = self.snapshots.get(newest)
        if newest < weights_version(step.iteration, self.max_staleness):
            raise RuntimeError(f"policy version {newest} is older than the bound allows")
        if snapshot is None or self._served.get(node.name, 0) >= newest:
            return
        self._sync(step, self.graph.nodes[node.weights_from], node, snapshot)
        self._served[node.name] = newest

    def _sync(self, step: Step, source: Node, node: Node, snapshot: WeightsSnapshot | None) -> None:
        kill_point("weight_sync", f"{step}")
        _, sync_s = self.runner.sync_weights(source, node, snapshot)
        with self._lock:
            self._sync_s[step.iteration] = self._sync_s.get(step.iteration, 0.0) + sync_s

    def _after_train(self, step: Step, node: Node) -> None:
        """After a train step: checkpoint when due, and, with k > 0, freeze the new version
        for the generate steps that will run on it while training goes on."""
        if node.op.checkpointable and checkpoints.due(self.loaded.spec, step.iteration):
            checkpoints.save_node(self, step.iteration, node)
        if self.max_staleness and self.graph.feeds_weights(node.name):
            snapshot = self.runner.snapshot_weights(node)
            with self._lock:
                self.snapshots[snapshot.version] = snapshot
                for old in sorted(self.snapshots)[: -(self.max_staleness + 1)]:
                    del self.snapshots[old]  # generate of iteration i needs version i - k

    def _persist(self, step: Step, table: pa.Table) -> EdgeHandle:
        refill = f"round={step.round}/" if step.round else ""  # rldag.engine.refill
        rel = f"{self.run_id}/iter={step.iteration}/{refill}{step.node}.parquet"
        uri = ""
        if self._persists(step.node):  # written in the background; finish_iteration waits
            uri = self.storage.uri(rel)
            future = self._writer.submit(self.storage.write_table, rel, table)
            with self._lock:
                self._pending.setdefault(step.iteration, []).append((uri, future))
        columns = tuple(table.column_names)
        return EdgeHandle(
            self.run_id, step.iteration, step.node, uri, table.num_rows, table.nbytes, columns
        )

    def table(self, iteration: int, name: str) -> pa.Table:
        """A finished table of an iteration in flight."""
        return self._streams[Step(iteration, name)].table()

    def flush(self, iteration: int) -> None:
        """Wait until the iteration's edge tables are stored; a failed write is a RunError
        naming the file."""
        with self._lock:
            pending = self._pending.pop(iteration, [])
        for uri, future in pending:
            err = future.exception()
            if err is not None:
                raise RunError(f"could not store {uri}: {err!r}")

    def finish_iteration(self, iteration: int, seconds: float) -> dict[str, float]:
        """Wait for the iteration's edge tables to be stored, compute its metrics, rewrite
        metrics.parquet, free its tables."""
        if self.lock is not None:
            self.lock.check()  # a process that lost the run writes nothing more
        self.flush(iteration)
        names = self.graph.order
        tables = {n: self.table(iteration, n) for n in names}
        node_s = {n: self._seconds.get(Step(iteration, n), 0.0) for n in names}
        row = {"iteration": float(iteration)}
        sync_s = self._sync_s.pop(iteration, 0.0)
        row |= iteration_metrics(self.graph, tables, node_s, sync_s, iteration)
        row["timing_s/iteration"] = seconds
        self.metrics.append({sys.intern(k): v for k, v in row.items()})  # one copy of each key
        keys = list(dict.fromkeys(k for r in self.metrics for k in r))
        table = pa.table({k: [r.get(k) for r in self.metrics] for k in keys})
        table = table.set_column(0, "iteration", table["iteration"].cast(pa.int64()))
        self.storage.write_table(f"{self.run_id}/metrics.parquet", table)
        with self._lock:
            for n in names:
                self._streams.pop(Step(iteration, n), None)
                self._seconds.pop(Step(iteration, n), None)
        return row

    def close(self) -> None:
        """Finish pending writes, release the pools and the run's lock."""
        try:
            self._writer.shutdown(wait=True)
            self.runner.close()
        finally:
            if self.lock is not None:
                self.lock.release()
