"""The typed DAG of one iteration: nodes, ports, edges, topological order, edge schemas.

Built from a validated spec before anything runs. The weights edge (train -> generate) is
loop-carried: it feeds iteration i from the train node of iteration i-1, so it is not part of
the per-iteration DAG and cannot form a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa

from rldag.config.errors import GraphError, InputError
from rldag.config.model_paths import check_param_model_paths
from rldag.config.spec import LoadedPipeline, NodeKind, NodeSpec, merge_params
from rldag.graph.operator import OperatorDef
from rldag.graph.refill import check_refill
from rldag.graph.registry import resolve
from rldag.graph.schema import check_edge, extend, to_schema
from rldag.graph.streaming import shares_workers, wait_reason


@dataclass
class Node:
    """A node of the graph with its resolved operator, validated params and output schema."""

    name: str
    spec: NodeSpec
    op: OperatorDef  # with `streams` off where the node waits for its whole input (`waits`)
    params: object
    inputs: dict[str, str]  # table port -> upstream node
    weights_from: str | None  # the train node whose weights this node loads
    output: pa.Schema
    waits: str = ""  # why its operator streams but this node waits (rldag.graph.streaming)

    @property
    def kind(self) -> NodeKind:
        return self.spec.kind

    @property
    def pool(self) -> str:
        """The node's pool: its own `pool:`, else its operator's, else by kind."""
        return self.spec.pool or self.op.pool or self.spec.resolved_pool


@dataclass
class Graph:
    """Nodes in topological order (ties keep pipeline.yaml order)."""

    nodes: dict[str, Node]

    @property
    def order(self) -> list[str]:
        return list(self.nodes)

    def feeds_weights(self, name: str) -> bool:
        """Whether a node loads `name`'s weights (it is the source of a weights edge)."""
        return any(n.weights_from == name for n in self.nodes.values())

    def consumers(self, name: str) -> list[str]:
        """Nodes that read `name`'s table."""
        return [n.name for n in self.nodes.values() if name in n.inputs.values()]


def _resolve_node(name: str, spec: NodeSpec, where: str) -> tuple[OperatorDef, object]:
    try:
        op = resolve(
            spec.op, spec.kind, f"{where}: nodes.{name}.op" if where else f"nodes.{name}.op"
        )
    except GraphError as err:
        raise GraphError(err.message, path=f"nodes.{name}.op", where=where) from None
    params = spec.params
    if op.params is not None:
        params = merge_params(op.params, spec.params, where, f"nodes.{name}.params")
        check_param_model_paths(params, f"nodes.{name}.params", where)
    elif spec.params:
        key = next(iter(spec.params))
        raise GraphError(
            f"operator '{spec.op}' takes no params", path=f"nodes.{name}.params.{key}", where=where
        )
    return op, params


def _wire_ports(
    name: str, spec: NodeSpec, op: OperatorDef, specs: dict[str, NodeSpec], where: str
) -> tuple[dict[str, str], str | None]:
    ports = {p.name: p for p in op.ports}
    tables: dict[str, str] = {}
    weights_from = None
    for port, upstream in spec.inputs.items():
        path = f"nodes.{name}.inputs.{port}"
        if port not in ports and op.named_ports is not None:
            ports[port] = op.named_ports
        if port not in ports:
            known = ", ".join(ports) or "none"
            raise GraphError(
                f"operator '{op.name}' has no port '{port}' (ports: {known})",
                path=path,
                where=where,
            )
        if upstream not in specs:
            known = ", ".join(specs)
            raise GraphError(
                f"node '{upstream}' does not exist (nodes: {known})", path=path, where=where
            )
        if upstream == name and not ports[port].weights:
            raise GraphError(f"node '{name}' reads its own output", path=path, where=where)
        if ports[port].weights:
            if specs[upstream].kind != NodeKind.train:
                raise GraphError(
                    f"the weights port must come from a train node; '{upstream}' is "
                    f"{specs[upstream].kind.value}",
                    path=path,
                    where=where,
                )
            weights_from = upstream
        else:
            tables[port] = upstream
    for port in op.ports:
        if not port.optional and port.name not in spec.inputs:
            raise GraphError(
                f"required port '{port.name}' of operator '{op.name}' is not connected",
                path=f"nodes.{name}.inputs",
                where=where,
            )
    return tables, weights_from


def _topological_order(edges: dict[str, dict[str, str]], where: str) -> list[str]:
    remaining = {n: set(ins.values()) for n, ins in edges.items()}
    order: list[str] = []
    while remaining:
        ready = [n for n, deps in remaining.items() if not deps - set(order)]
        if not ready:
            cycle = " -> ".join(sorted(remaining))
            raise GraphError(
                f"the graph has a cycle among nodes: {cycle}", path="nodes", where=where
            )
        order.append(ready[0])
        del remaining[ready[0]]
    return order


def _in_params(err: InputError, node: str, where: str, message: str = "") -> InputError:
    """`err` (its path relative to node's params) at its key path in pipeline.yaml."""
    path = f"nodes.{node}.params" + (f".{err.path}" if err.path else "")
    return InputError(message or err.message, path=path, where=where)


def _preflight(node: Node, where: str) -> None:
    """The operator's own checks before compute (a multi-turn node's chat template)."""
    if node.op.preflight is None:
        return
    try:
        node.op.preflight(node.params)
    except InputError as err:
        raise _in_params(err, node.name, where, f"node '{node.name}': {err.message}") from None


def _output_schema(node: Node, upstream: dict[str, pa.Schema], where: str) -> pa.Schema:
    op = node.op
    if op.output_schema is not None:
        try:
            return op.output_schema(node.params)
        except InputError as err:
            raise _in_params(err, node.name, where) from None
    table_ports = op.table_ports
    declared = {p.name: p for p in table_ports}
    for name, producer in node.inputs.items():
        check_edge(
            (declared.get(name) or op.named_ports).columns,
            upstream[producer],
            consumer=node.name,
            port=name,
            producer=producer,
            where=where,
        )
    first = table_ports[0].name if table_ports else None
    primary = upstream[node.inputs[first]] if first in node.inputs else None
    inputs = {p: upstream[u] for p, u in node.inputs.items()}
    if op.check_input is not None:
        try:
            op.check_input(node.params, inputs)
        except InputError as err:  # its path: a params key, or inputs.<port>
            if err.path.startswith("inputs."):
                path = f"nodes.{node.name}.{err.path}"
                raise InputError(err.message, path=path, where=where) from None
            raise _in_params(err, node.name, where) from None
    extra = op.adds_from_inputs(node.params, inputs) if op.adds_from_inputs else ()
    adds = extra + op.adds
    if op.passthrough and primary is not None:
        return extend(primary, adds)
    return to_schema(adds)


def build_graph(loaded: LoadedPipeline) -> Graph:
    """Resolve operators, validate params, wire ports, order nodes, check every edge and run
    the operators' preflight checks."""
    where = loaded.source
    specs = loaded.spec.nodes
    partial: dict[str, Node] = {}
    for name, spec in specs.items():
        op, params = _resolve_node(name, spec, where)
        tables, weights_from = _wire_ports(name, spec, op, specs, where)
        partial[name] = Node(name, spec, op, params, tables, weights_from, pa.schema([]))
    order = _topological_order({n: node.inputs for n, node in partial.items()}, where)
    schemas: dict[str, pa.Schema] = {}
    for name in order:
        node = partial[name]
        node.output = schemas[name] = _output_schema(node, schemas, where)
        _preflight(node, where)
        node.waits = wait_reason(node, partial, loaded.spec)
        if node.waits:
            node.op = replace(node.op, streams=False)
    graph = Graph({name: partial[name] for name in order})
    _check_overlap(loaded, graph)
    check_refill(graph, where)
    return graph


def _check_overlap(loaded: LoadedPipeline, graph: Graph) -> None:
    """async.max_staleness > 0 overlaps generation with training: refuse placements where
    they share workers (a worker runs one of them at a time), instead of running in sync."""
    spec = loaded.spec
    k = spec.async_.max_staleness
    if not k or not spec.ray.enabled:
        return
    for node in graph.nodes.values():
        if node.weights_from is None:
            continue
        trainer = graph.nodes[node.weights_from]
        if shares_workers(spec, node.pool, trainer.pool):
            raise GraphError(
                f"async.max_staleness={k} overlaps generation with training, but generate "
                f"node '{node.name}' (pool {node.pool}) and train node "
                f"'{trainer.name}' (pool {trainer.pool}) share workers "
                f"(pools.colocate={spec.pools.colocate}): split them with pools.colocate=[] "
                "or run synchronously with async.max_staleness=0",
                path="async.max_staleness",
                where=loaded.source,
            )
