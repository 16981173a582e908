"""The cost model the simulator and the planner read: per node, seconds per call as a function
of its input rows, its tokens and the workers of its pool; the weight sync per parameter; the
driver's own time per iteration. Fitted from a run's stored metrics and tables and stored
next to it as `<run>/costs.parquet`.

A node's call costs ``per_call_s + (per_row_s * rows + per_token_s * tokens) * w0 / workers``
with `w0` the workers it was measured on: rows are its input's rows (prompts for a generate
node, calls for an environment), tokens the sequence tokens it handles (generated ones for a
generate node, prompt + response for the rest).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rldag.config.errors import InputError
from rldag.config.spec import NodeKind
from rldag.graph.dag import Graph
from rldag.storage.store import Storage

COSTS_FILE = "costs.parquet"
SYNC_ROW = "weight_sync"  # the table row of the weights edge (pool: colocated | split)
DRIVER_ROW = "iteration"  # the table row of the driver's time per iteration
WARMUP = 1  # iterations skipped when fitting (the first builds workers and loads models)


@dataclass(frozen=True)
class NodeCost:
    """One node's cost: seconds of a call from its rows, tokens and workers."""

    node: str
    kind: str
    pool: str
    per_call_s: float = 0.0
    per_row_s: float = 0.0
    per_token_s: float = 0.0
    workers: int = 1  # the workers it was measured on
    rows: float = 0.0  # mean input rows per iteration, as measured
    tokens: float = 0.0  # mean tokens per iteration, as measured

    def seconds(
        self, rows: float | None = None, tokens: float | None = None, workers: int | None = None
    ) -> float:
        """Seconds of one call (default: the measured rows, tokens and workers)."""
        rows = self.rows if rows is None else rows
        tokens = self.tokens if tokens is None else tokens
        share = self.workers / (workers or self.workers)
        return self.per_call_s + (self.per_row_s * rows + self.per_token_s * tokens) * share


@dataclass(frozen=True)
class CostModel:
    """Every node's cost plus the weights edge and the driver; `samples` rows train per
    iteration, `groups` prompt groups per iteration, `params` the policy's parameters."""

    nodes: dict[str, NodeCost]
    sync_per_param_s: dict[str, float] = field(default_factory=dict)  # colocated | split
    params: int = 0
    driver_s: float = 0.0  # the driver's own seconds per iteration (metrics, closing)
    samples: float = 0.0
    groups: float = 0.0

    def sync_s(self, split: bool) -> float:
        """Seconds of one weight sync (split pools, or colocated); an unmeasured route is
        estimated from the measured one."""
        mode = "split" if split else "colocated"
        per = self.sync_per_param_s.get(mode)
        if per is None:
            per = next(iter(self.sync_per_param_s.values()), 0.0)
        return per * self.params

    def to_table(self) -> pa.Table:
        """The model as one small table: a row per node, the weights edge and the driver."""
        rows = [asdict(c) | {"per_param_s": 0.0} for c in self.nodes.values()]
        for mode, per in self.sync_per_param_s.items():
            rows.append(
                asdict(NodeCost(SYNC_ROW, "weights", mode, rows=self.params)) | {"per_param_s": per}
            )
        driver = NodeCost(DRIVER_ROW, "driver", "driver", self.driver_s, 0.0, 0.0, 1, self.samples)
        rows.append(asdict(replace(driver, tokens=self.groups)) | {"per_param_s": 0.0})
        return pa.Table.from_pylist(rows)

    @classmethod
    def from_table(cls, table: pa.Table, where: str = "") -> CostModel:
        """Read a table written by `to_table`; InputError naming the missing column."""
        names = [f.name for f in fields(NodeCost)] + ["per_param_s"]
        missing = [n for n in names if n not in table.column_names]
        if missing:
            raise InputError(f"a cost table needs columns {missing}", where=where)
        nodes, sync, model = {}, {}, {}
        for row in table.select(names).to_pylist():
            per_param = row.pop("per_param_s")
            cost = NodeCost(**row)
            if cost.node == SYNC_ROW:
                sync[cost.pool] = per_param
                model["params"] = int(cost.rows)
            elif cost.node == DRIVER_ROW:
                model |= {"driver_s": cost.per_call_s, "samples": cost.rows, "groups": cost.tokens}
            else:
                nodes[cost.node] = cost
        return cls(nodes, sync, **model)

    def save(self, storage: Storage, run_id: str) -> str:
        """Store the model next to its run; returns the file's URI."""
        return storage.write_table(f"{run_id}/{COSTS_FILE}", self.to_table()).uri

    @classmethod
    def load(cls, storage: Storage, run_id: str) -> CostModel:
        rel = f"{run_id}/{COSTS_FILE}"
        if not storage.exists(rel):
            raise InputError(f"no cost table {storage.uri(rel)}", path="--costs")
        return cls.from_table(storage.read_table(rel), storage.uri(rel))


def fit_linear(
    seconds: Sequence[float], rows: Sequence[float], tokens: Sequence[float], by_tokens: bool
) -> tuple[float, float]:
    """(per_row_s, per_token_s) from calls' seconds: least squares on both when the
    iterations vary enough to tell them apart and both come out >= 0, else all on the
    primary term (tokens for generate and train, rows for the rest)."""
    y = np.asarray(seconds, dtype=float)
    x = np.column_stack([np.asarray(rows, float), np.asarray(tokens, float)])
    if len(y) >= 3 and np.linalg.matrix_rank(x) == 2 and np.linalg.cond(x) < 1e3:
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        if (coef >= 0).all():
            return float(coef[0]), float(coef[1])
    primary = x[:, 1] if by_tokens else x[:, 0]
    if primary.sum() <= 0:  # e.g. a node that sees no tokens: all on rows
        primary, by_tokens = x[:, 0], False
    per = float(y.sum() / primary.sum()) if primary.sum() > 0 else 0.0
    return (0.0, per) if by_tokens else (per, 0.0)


def _tokens(table: pa.Table, generated_only: bool) -> float:
    cols = ("response_ids",) if generated_only else ("prompt_ids", "response_ids")
    total = 0
    for col in cols:
        if col in table.column_names:
            total += pc.sum(pc.list_value_length(table[col])).as_py() or 0
    return float(total)


@dataclass
class Observations:
    """Per node, per fitted iteration: (seconds, rows, tokens)."""

    calls: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)
    sync_s: list[float] = field(default_factory=list)
    driver_s: list[float] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    groups: list[float] = field(default_factory=list)


def observe_stored_run(
    storage: Storage, run_id: str, graph: Graph, ends: Sequence[float] = ()
) -> Observations:
    """Read a finished run's metrics and tables. `ends`: wall-clock seconds at each
    iteration's end when the caller timed the run (the driver's time per iteration is
    their spacing minus the iteration's own seconds); else only gaps inside iterations."""
    rel = f"{run_id}/metrics.parquet"
    if not storage.exists(rel):
        raise InputError(f"run {run_id!r} under {storage.root} has no metrics.parquet", path="RUN")
    metrics = storage.read_table(rel).to_pylist()
    skip = WARMUP if len(metrics) > WARMUP else 0
    obs = Observations()
    for m in metrics[skip:]:
        i = int(m["iteration"])
        tables = {}
        for name in graph.order:
            path = f"{run_id}/iter={i}/{name}.parquet"
            if not storage.exists(path):
                raise InputError(
                    f"{storage.uri(path)} is missing: fitting costs needs every node's table "
                    "(storage.persist: true)",
                    path=f"nodes.{name}.persist",
                )
            tables[name] = storage.read_table(path)
        busy = 0.0
        for name, node in graph.nodes.items():
            ports = [p.name for p in node.op.table_ports if p.name in node.inputs]
            source = tables[node.inputs[ports[0]]] if ports else tables[name]
            generate = node.kind == NodeKind.generate
            tokens = _tokens(tables[name] if generate else source, generated_only=generate)
            seconds = float(m.get(f"timing_s/{name}") or 0.0)
            busy += seconds
            obs.calls.setdefault(name, []).append((seconds, float(source.num_rows), tokens))
            if node.kind == NodeKind.train and ports:
                obs.samples.append(float(source.num_rows))
                groups = (
                    pc.count_distinct(source["prompt_id"]).as_py()
                    if "prompt_id" in source.column_names
                    else source.num_rows
                )
                obs.groups.append(float(groups))
        obs.sync_s.append(float(m.get("timing_s/weight_sync") or 0.0))
        spacing = m.get("timing_s/iteration") or busy
        if len(ends) == len(metrics) and i > 0:
            spacing = ends[i] - ends[i - 1]
        obs.driver_s.append(max(0.0, float(spacing) - busy))
    return obs


def fit_costs(
    graph: Graph,
    obs: Observations,
    workers: Mapping[str, int],
    params: int,
    colocated: bool,
    synchronous: bool = True,
) -> CostModel:
    """The cost model of `graph` from observations of a run on `workers` (pool -> workers).
    The driver's time per iteration is only known from a run whose steps ran one after
    another (`synchronous`: k = 0, no streaming); otherwise it is taken as 0."""
    nodes = {}
    for name, node in graph.nodes.items():
        calls = obs.calls.get(name, [])
        if not calls:
            continue
        seconds, rows, tokens = zip(*calls, strict=True)
        by_tokens = node.kind in (NodeKind.generate, NodeKind.train)
        per_row, per_token = fit_linear(seconds, rows, tokens, by_tokens)
        pool = str(getattr(node.pool, "value", node.pool))
        nodes[name] = NodeCost(
            name,
            node.kind.value,
            pool,
            0.0,
            per_row,
            per_token,
            workers.get(pool, 1),
            statistics.fmean(rows),
            statistics.fmean(tokens),
        )
    sync = {}
    if params and obs.sync_s and any(n.weights_from for n in graph.nodes.values()):
        sync["colocated" if colocated else "split"] = statistics.median(obs.sync_s) / params
    return CostModel(
        nodes,
        sync,
        params,
        statistics.median(obs.driver_s) if synchronous and obs.driver_s else 0.0,
        statistics.fmean(obs.samples) if obs.samples else 0.0,
        statistics.fmean(obs.groups) if obs.groups else 0.0,
    )
