"""What `rldag plan` prints: the nodes in order with their columns, then the placement."""

from __future__ import annotations

from rich.console import Console

from rldag.compute.placement import Placement
from rldag.config.spec import AsyncMode, LoadedPipeline
from rldag.config.weights import WeightsTransport
from rldag.engine.scheduler import emits_chunks
from rldag.graph import refill
from rldag.graph.dag import Graph, Node


def print_nodes(console: Console, loaded: LoadedPipeline, graph: Graph) -> None:
    spec = loaded.spec
    console.print(
        f"[bold]{spec.name}[/bold]: {len(graph.nodes)} nodes, {spec.iterations} iterations, "
        f"storage {spec.storage.uri}",
        highlight=False,
    )
    for i, (name, node) in enumerate(graph.nodes.items()):
        console.print(
            f"{i:>2} [bold]{name}[/bold]  kind={node.kind.value}  op={node.op.name}  "
            f"pool={node.pool}  {'stateful' if node.op.stateful else 'stateless'}",
            highlight=False,
        )
        ports = {p.name: p for p in node.op.ports}
        for port, upstream in node.inputs.items():
            needs = ", ".join(c.name for c in (ports.get(port) or node.op.named_ports).columns)
            console.print(f"     in   {port} <- {upstream}  (needs {needs})", highlight=False)
        if node.weights_from:
            lag = f"i-{1 + spec.async_.max_staleness}"
            console.print(f"     in   weights <- {node.weights_from}[{lag}]", markup=False)
        added = {c.name for c in node.op.adds}
        if node.op.adds_from_inputs is not None:
            schemas = {p: graph.nodes[u].output for p, u in node.inputs.items()}
            added |= {c.name for c in node.op.adds_from_inputs(node.params, schemas)}
        new = [f.name for f in node.output if f.name in added or not node.inputs]
        kept = len(node.output) - len(new)
        more = f"  (+ {kept} columns passed through)" if kept else ""
        console.print(f"     out  {', '.join(new)}{more}", highlight=False)


SPLIT_ROUTE = {
    WeightsTransport.auto: "broadcast group (object store if it cannot form) (split)",
    WeightsTransport.collective: "broadcast group (split)",
    WeightsTransport.object_store: "Ray object store broadcast (split)",
}


def _weights_route(graph: Graph, placement: Placement, transport: WeightsTransport) -> list[str]:
    lines = []
    for node in graph.nodes.values():
        if node.weights_from is None:
            continue
        src, dst = placement.group_of(node.weights_from), placement.group_of(node.name)
        how = "in-process (colocated)" if src is dst else SPLIT_ROUTE[transport]
        lines.append(f"weights {node.weights_from} -> {node.name}: {how}")
    return lines


def _companion_bound(graph: Graph, placement: Placement, name: str) -> str:
    """How many calls of `name` run at once over its workers (its actors' bound)."""
    node = graph.nodes[name]
    if node.op.concurrency is None:
        return "unbounded"
    per_worker = node.op.concurrency(node.params)
    workers = placement.group_of(name).workers
    return f"at most {per_worker * workers} at once: {workers} worker(s) x {per_worker}"


def print_placement(
    console: Console, loaded: LoadedPipeline, graph: Graph, placement: Placement
) -> None:
    if not loaded.spec.ray.enabled:
        console.print("placement: ray.enabled=false, every node runs in the driver process")
        return
    where = loaded.spec.ray.address or "embedded local Ray"
    console.print(
        f"placement on {where}, checked against {placement.cluster.describe()}", highlight=False
    )
    for group in placement.groups.values():
        mode = "colocated" if group.colocated else "split"
        bundle = ", ".join(f"{k}: {v:g}" for k, v in group.bundle.items())
        line = (
            f"  pool {group.name}  {mode}  placement group {group.workers} x {{{bundle}}} "
            f"{group.strategy.value}  workers {group.workers}  runs {', '.join(group.nodes) or '-'}"
        )
        if group.max_concurrency:
            line += f"  max concurrency {group.max_concurrency}"
        for name in group.companions:
            line += f"  hosts {name}'s actors ({_companion_bound(graph, placement, name)})"
        console.print(line, markup=False, highlight=False)
    console.print(
        f"  driver  runs {', '.join(placement.driver_nodes) or 'nothing'}", highlight=False
    )
    for line in _weights_route(graph, placement, loaded.spec.weights.transport):
        console.print(f"  {line}", highlight=False)


def print_execution(console: Console, loaded: LoadedPipeline, graph: Graph) -> None:
    """What runs at the same time: iterations in flight, what overlaps what, which edges
    stream and which nodes wait for their whole batch."""
    k = loaded.spec.async_.max_staleness
    if k == 0:
        console.print(
            "execution: synchronous (async.max_staleness=0): iteration i+1 starts when "
            "iteration i has finished",
            highlight=False,
        )
    else:
        continuous = loaded.spec.async_.mode is AsyncMode.continuous
        version = "the newest policy version, at least" if continuous else "policy version"
        console.print(
            f"execution: async.max_staleness={k}: up to {k + 1} iterations in flight; generate "
            f"of iteration i runs on {version} i-{k} (train of iteration i-{k + 1})",
            highlight=False,
        )
        for node in graph.nodes.values():
            if node.weights_from is None:
                continue
            later = [n for n in graph.order if n != node.name and n in _downstream(graph, node)]
            if filtered := refill.waits_for_refill(graph).get(node.name):  # after its rounds
                later = [n for n in later if n in _downstream(graph, graph.nodes[filtered])]
            ahead = "i+1" if k == 1 else f"i+1..i+{k}"
            console.print(
                f"  overlaps: {node.name} of iterations {ahead} (pool {node.pool}) "
                f"with {', '.join(later)} of iteration i",
                highlight=False,
            )
        waits = refill.waits_for_refill(graph)  # with refill, no engine overlaps iterations
        engines = [n for n, node in graph.nodes.items() if node.op.continuous and n not in waits]
        if continuous and engines:
            console.print(
                f"  continuous: {', '.join(engines)} of iterations i..i+{k} share one engine "
                "(finished sequences' slots go to later prompts); new weights land between "
                "decode steps, each token's version stored in response_versions",
                highlight=False,
            )
    if (refilling := refill.refill_node(graph)) is not None:
        rerun = ", ".join(refill.upstream(graph, refilling.name))
        more = refill.max_rounds(refilling) - 1
        console.print(
            f"  refill: while {refilling.name} is short, up to {more} more rounds of {rerun} "
            "per iteration, on fresh prompts",
            highlight=False,
        )
    chunk = loaded.spec.async_.chunk_groups
    readers = [node for node in graph.nodes.values() if node.inputs]
    waits = {node.name: _waits_because(loaded, graph, node) for node in readers}
    streamed = [
        f"{node.name} <- {node.inputs[_primary(node)]}"
        + (" (steps as chunks arrive)" if node.op.consumes_chunks else "")
        for node in readers
        if not waits[node.name]
    ]
    if streamed:
        console.print(
            f"  streamed (start on the first chunk of {chunk} prompt groups): "
            + ", ".join(streamed),
            highlight=False,
        )
    whole = [name for name, why in waits.items() if why]
    if whole:
        console.print(f"  whole batch: {', '.join(whole)}", highlight=False)
        for name in whole:
            console.print(f"    {name}: {waits[name]}", highlight=False)


def _primary(node: Node) -> str | None:
    """The input port a node streams: its first table port that is connected."""
    return next((p.name for p in node.op.table_ports if p.name in node.inputs), None)


def _waits_because(loaded: LoadedPipeline, graph: Graph, node: Node) -> str:
    """Why `node` waits for its whole input table ("" when it takes it chunk by chunk)."""
    if node.waits:  # its params or its placement (rldag.graph.streaming)
        return node.waits
    if not node.op.streams:
        return f"operator {node.op.name} takes its whole input"
    if not loaded.spec.async_.chunk_groups:
        return "async.chunk_groups=0: no edge streams"
    primary = _primary(node)
    if primary is None:
        return "it reads no table input"
    upstream = node.inputs[primary]
    return "" if emits_chunks(graph.nodes[upstream]) else f"its input {upstream} arrives whole"


def _downstream(graph: Graph, node: Node) -> set[str]:
    """Nodes that read `node`'s table, directly or not."""
    out: set[str] = set()
    frontier = [node.name]
    while frontier:
        for consumer in graph.consumers(frontier.pop()):
            if consumer not in out:
                out.add(consumer)
                frontier.append(consumer)
    return out
