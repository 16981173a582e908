"""Per-iteration metrics from the iteration's edge tables and node timings.

Names follow what veRL users read: ``reward/mean``, ``timing_s/<node>``, ``perf/tokens_per_s``;
``score/<node>/errors|dropped`` count a score node's failed reward calls (and
``score/<node>/retried_rows`` the rows a remote verifier answered only on a retry);
``reward/<name>`` is a composed reward's component; an operator may
report its own counts (``dapo/kept_groups``) with rldag.graph.reported.with_reported_metrics.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rldag.config.spec import NodeKind
from rldag.graph.dag import Graph
from rldag.graph.reported import reported_metrics


def _components(graph: Graph) -> set[str]:
    """Nodes whose tables are components of another's (a combine's named ports)."""
    out = set()
    for node in graph.nodes.values():
        declared = {p.name for p in node.op.table_ports}
        out |= {u for p, u in node.inputs.items() if node.op.named_ports and p not in declared}
    return out


def _first_with(
    graph: Graph, tables: Mapping[str, pa.Table], column: str, skipped: set[str] | None = None
) -> pa.Table | None:
    """The first table in graph order with `column`, components of a composed reward
    skipped (their combination is the reward), and the nodes in `skipped`."""
    skipped = _components(graph) | (skipped or set())
    for name in (n for n in graph.order if n not in skipped):
        table = tables.get(name)
        if table is not None and column in table.column_names and table.num_rows:
            return table
    return None


def _mean(array: pa.ChunkedArray) -> float:
    value = pc.mean(array).as_py()
    return float(value) if value is not None else float("nan")


def staleness_metrics(batch: pa.Table, iteration: int) -> dict[str, float]:
    """How many versions behind the policy that trains at `iteration` (version
    `iteration`) each row's generating policy is: mean, max and the share per lag; per
    token too where rows record each token's version, and how many rows span versions."""
    if "policy_version" not in batch.column_names or batch.num_rows == 0:
        return {}
    lag = iteration - batch["policy_version"].to_numpy()
    out = {"staleness/mean": float(lag.mean()), "staleness/max": float(lag.max())}
    values, counts = np.unique(lag, return_counts=True)
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        out[f"staleness/share_{value}"] = count / batch.num_rows
    if "response_versions" in batch.column_names:  # per token: rows may span versions
        versions = batch["response_versions"]
        token_lag = iteration - pc.list_flatten(versions).to_numpy()
        if token_lag.size:
            out["staleness/token_mean"] = float(token_lag.mean())
            out["staleness/token_max"] = float(token_lag.max())
        newest = batch["policy_version_max"].to_numpy()
        out["rollout/spanning_rows"] = float((newest > batch["policy_version"].to_numpy()).sum())
    return out


def score_error_counts(graph: Graph, tables: Mapping[str, pa.Table]) -> dict[str, float]:
    """Per score node that reports `reward_error`: rows whose reward call failed
    (``score/<node>/errors``) and, of those, rows it removed (``score/<node>/dropped``: its
    input's rows minus its own)."""
    out: dict[str, float] = {}
    for name in graph.order:
        node, table = graph.nodes[name], tables.get(name)
        if node.kind != NodeKind.score or table is None or "reward_error" not in table.column_names:
            continue
        ports = [p.name for p in node.op.table_ports if p.name in node.inputs]
        upstream = tables.get(node.inputs[ports[0]]) if ports else None
        dropped = upstream.num_rows - table.num_rows if upstream is not None else 0
        kept = pc.sum(pc.not_equal(table["reward_error"], "")).as_py() or 0
        out[f"score/{name}/errors"] = float(kept + dropped)
        out[f"score/{name}/dropped"] = float(dropped)
        if "reward_attempts" in table.column_names:  # a remote verifier's requests per row
            retried = pc.sum(pc.greater(table["reward_attempts"], 1)).as_py() or 0
            out[f"score/{name}/retried_rows"] = float(retried)
    return out


def component_rewards(graph: Graph, tables: Mapping[str, pa.Table]) -> dict[str, float]:
    """``reward/<name>``: the mean of each float column ``reward_<name>`` a node added (the
    components of a composed reward)."""
    out: dict[str, float] = {}
    for name in graph.order:
        table = tables.get(name)
        if table is None or not table.num_rows:
            continue
        inherited = {c for u in graph.nodes[name].inputs.values() for c in _names(tables.get(u))}
        for field in table.schema:
            if field.name.startswith("reward_") and field.name not in inherited:
                if pa.types.is_floating(field.type):
                    out[f"reward/{field.name[len('reward_') :]}"] = _mean(table[field.name])
    return out


def _names(table: pa.Table | None) -> list[str]:
    return table.column_names if table is not None else []


def iteration_metrics(
    graph: Graph,
    tables: Mapping[str, pa.Table],
    seconds: Mapping[str, float],
    weight_sync_s: float,
    iteration: int = 0,
) -> dict[str, float]:
    """Reward, length, throughput, timing, staleness and train metrics for one iteration."""
    out: dict[str, float] = {}
    generators = {n for n in graph.order if graph.nodes[n].kind == NodeKind.generate}
    # a score node's reward replaces an agent's environment reward; without one, the latter
    scored = _first_with(graph, tables, "reward", generators) or _first_with(
        graph, tables, "reward"
    )
    if scored is not None:
        out["reward/mean"] = _mean(scored["reward"])
        out["reward/std"] = float(pc.stddev(scored["reward"], ddof=0).as_py() or 0.0)
    generated = _first_with(graph, tables, "response_ids")
    if generated is not None:
        lengths = pc.list_value_length(generated["response_ids"])
        out["response_length/mean"] = _mean(lengths)
        out["response_length/max"] = float(pc.max(lengths).as_py())
        if "policy_version" in generated.column_names:
            out["policy_version"] = float(pc.max(generated["policy_version"]).as_py())
        gen_s = sum(seconds.get(n, 0.0) for n in graph.order if graph.nodes[n].kind == "generate")
        if gen_s > 0:
            out["perf/tokens_per_s"] = float(pc.sum(lengths).as_py()) / gen_s
    for name in graph.order:
        node = graph.nodes[name]
        out[f"timing_s/{name}"] = seconds.get(name, 0.0)
        table = tables.get(name)
        if node.kind == NodeKind.train and node.inputs:
            batch = tables.get(next(iter(node.inputs.values())))
            if batch is not None:
                out |= staleness_metrics(batch, iteration)
        if node.kind == NodeKind.train and table is not None and table.num_rows:
            for field in table.schema:
                if pa.types.is_floating(field.type) or pa.types.is_integer(field.type):
                    out[f"train/{field.name}"] = _mean(table[field.name])
    out["timing_s/weight_sync"] = weight_sync_s
    out |= score_error_counts(graph, tables)
    out |= component_rewards(graph, tables)
    out |= reported_metrics(graph, tables)
    return out
