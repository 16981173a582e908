"""One run of a pipeline, independent of the orchestrator: executes a node of an iteration,
persists its table, closes an iteration with its metrics.

The Prefect tasks and flows call into this; so could any other driver. Runs are looked up by
id so that orchestrator parameters stay small (ids and handles, never tables).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from rldag.errors import InputError, RunError
from rldag.graph import Graph
from rldag.metrics import iteration_metrics
from rldag.operator import NodeContext
from rldag.pools import NodeRunner
from rldag.schema import check_table
from rldag.spec import LoadedPipeline
from rldag.storage import Storage, TableHandle, new_run_id, open_storage

_ACTIVE: dict[str, Run] = {}
_LISTENERS: list[Callable[..., None]] = []


def add_listener(listener: Callable[..., None]) -> Callable[[], None]:
    """Call `listener(event, run, *args)` on "start" (first iteration), "node" (i, name),
    "node_done" (i, name, rows, seconds), "iteration" (i, metrics) and "end"; returns a
    function that removes it (the CLI's progress display uses this)."""
    _LISTENERS.append(listener)
    return lambda: _LISTENERS.remove(listener)


def notify(event: str, run: Run, *args: object) -> None:
    """Tell the listeners about a run event."""
    for listener in list(_LISTENERS):
        listener(event, run, *args)


def get_run(run_id: str) -> Run:
    """The active run with this id (it lives in this driver process)."""
    return _ACTIVE[run_id]


@dataclass
class Run:
    """The state of one run: graph, storage, pools, this iteration's tables and the metrics."""

    loaded: LoadedPipeline
    graph: Graph
    storage: Storage
    run_id: str
    runner: NodeRunner
    metrics: list[dict[str, float]] = field(default_factory=list)
    _tables: dict[tuple[int, str], pa.Table] = field(default_factory=dict)
    _seconds: dict[tuple[int, str], float] = field(default_factory=dict)
    _sync_s: dict[int, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _writer: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="rldag-persist")
    )
    _pending: list[tuple[str, Future]] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        loaded: LoadedPipeline,
        graph: Graph,
        runner: NodeRunner | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Create the run directory with the resolved pipeline and register the run; with
        `run_id`, reopen that stored run (to resume it)."""
        storage = open_storage(loaded.spec.storage)
        if run_id is not None and not storage.exists(f"{run_id}/pipeline.yaml"):
            raise InputError(f"no run {run_id!r} under {storage.root}", path="--resume")
        if runner is None:
            from rldag.ray_pools import start_pools

            runner = start_pools(loaded.spec, graph, loaded.source)
        run = cls(loaded, graph, storage, run_id or new_run_id(loaded.spec.name), runner)
        storage.write_text(f"{run.run_id}/pipeline.yaml", loaded.resolved_yaml)
        _ACTIVE[run.run_id] = run
        return run

    @property
    def uri(self) -> str:
        return self.storage.uri(self.run_id)

    def _persists(self, name: str) -> bool:
        node = self.graph.nodes[name].spec
        return self.loaded.spec.storage.persist if node.persist is None else node.persist

    def execute_node(self, iteration: int, name: str) -> TableHandle:
        """Run node `name` of `iteration` on its pool; persist and return its handle."""
        node = self.graph.nodes[name]
        inputs = {port: self._tables[(iteration, up)] for port, up in node.inputs.items()}
        ctx = NodeContext(name, iteration, self.loaded.spec.seed, self.uri)
        notify("node", self, iteration, name)
        start = time.perf_counter()
        if node.weights_from is not None:
            source = self.graph.nodes[node.weights_from]
            _, sync_s = self.runner.sync_weights(source, node)
            with self._lock:
                self._sync_s[iteration] = self._sync_s.get(iteration, 0.0) + sync_s
        try:
            table = self.runner.run(node, inputs, ctx)
        except Exception as err:
            raise RunError(f"node '{name}' (iteration {iteration}) failed: {err!r}") from err
        problems = check_table(table, {f.name: f.type for f in node.output}, name)
        if problems:
            raise RunError(f"node '{name}' returned a table that breaks its schema: {problems}")
        seconds = time.perf_counter() - start
        rel = f"{self.run_id}/iter={iteration}/{name}.parquet"
        uri = ""
        if self._persists(name):  # written in the background; finish_iteration waits for it
            uri = self.storage.uri(rel)
            future = self._writer.submit(self.storage.write_table, rel, table)
            with self._lock:
                self._pending.append((uri, future))
        handle = TableHandle(uri, table.num_rows, table.nbytes, tuple(table.column_names))
        with self._lock:
            self._tables[(iteration, name)] = table
            self._seconds[(iteration, name)] = seconds
        notify("node_done", self, iteration, name, table.num_rows, seconds)
        return handle

    def table(self, iteration: int, name: str) -> pa.Table:
        """A table of the iteration in flight."""
        return self._tables[(iteration, name)]

    def flush(self) -> None:
        """Wait until every edge table handed out so far is stored; a failed write is a
        RunError naming the file."""
        with self._lock:
            pending, self._pending = self._pending, []
        failed = None
        for uri, future in pending:
            err = future.exception()
            if err is not None and failed is None:
                failed = RunError(f"could not store {uri}: {err!r}")
        if failed is not None:
            raise failed

    def finish_iteration(self, iteration: int, seconds: float) -> dict[str, float]:
        """Wait for the iteration's edge tables to be stored, compute its metrics, rewrite
        metrics.parquet, free its tables."""
        self.flush()
        names = self.graph.order
        tables = {n: self._tables[(iteration, n)] for n in names if (iteration, n) in self._tables}
        node_s = {n: self._seconds.get((iteration, n), 0.0) for n in names}
        row = {"iteration": float(iteration)}
        row |= iteration_metrics(self.graph, tables, node_s, self._sync_s.get(iteration, 0.0))
        row["timing_s/iteration"] = seconds
        self.metrics.append(row)
        keys = list(dict.fromkeys(k for r in self.metrics for k in r))
        table = pa.table({k: [r.get(k) for r in self.metrics] for k in keys})
        table = table.set_column(0, "iteration", table["iteration"].cast(pa.int64()))
        self.storage.write_table(f"{self.run_id}/metrics.parquet", table)
        with self._lock:
            for n in names:
                self._tables.pop((iteration, n), None)
        return row

    def run_inline(self, iterations: int | None = None) -> None:
        """Run iterations 0.. in this thread, node by node in order, without an orchestrator
        (debugging, tests, benchmarks); closes the run at the end."""
        count = self.loaded.spec.iterations if iterations is None else iterations
        try:
            for i in range(count):
                start = time.perf_counter()
                for name in self.graph.order:
                    self.execute_node(i, name)
                self.finish_iteration(i, time.perf_counter() - start)
        finally:
            self.close()

    def close(self) -> None:
        """Finish pending writes, release the pools and forget the run."""
        self._writer.shutdown(wait=True)
        self.runner.close()
        _ACTIVE.pop(self.run_id, None)
