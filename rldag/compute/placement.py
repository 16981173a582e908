"""Placement: pipeline nodes -> pools -> worker groups -> Ray placement groups.

Pure and checkable without Ray: `plan_placement` turns `pools:` and the graph into worker
groups (colocated pools share one group whose workers host all their nodes, HybridFlow's
hybrid engine; split pools get their own) and checks that every group fits the cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rldag.config.errors import PlacementError
from rldag.config.spec import AsyncMode, PipelineSpec, PlacementStrategy, PoolName, PoolSpec
from rldag.graph.dag import Graph


@dataclass(frozen=True)
class ClusterNode:
    """Resources of one machine of the cluster."""

    name: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class Cluster:
    """What exists: the machines and where that was read from."""

    nodes: tuple[ClusterNode, ...]
    source: str

    def describe(self) -> str:
        parts = [f"{n.name}: {n.cpus:g} CPU, {n.gpus:g} GPU" for n in self.nodes]
        return f"{self.source} ({'; '.join(parts)})"


@dataclass
class WorkerGroup:
    """One Ray placement group and its worker actors (one per bundle)."""

    name: str
    pools: tuple[str, ...]
    workers: int
    cpus: float  # per bundle
    gpus: float  # per bundle
    strategy: PlacementStrategy
    nodes: list[str] = field(default_factory=list)  # graph nodes it runs
    max_concurrency: int = 0
    companions: list[str] = field(default_factory=list)  # nodes whose own actors it hosts
    actor_calls: int = 1  # calls a worker serves at once (continuous generate steps overlap)

    @property
    def colocated(self) -> bool:
        return len(self.pools) > 1

    @property
    def bundle(self) -> dict[str, float]:
        out = {"CPU": self.cpus}
        if self.gpus:
            out["GPU"] = self.gpus
        return out


@dataclass
class Placement:
    """Worker groups for the pools in use, plus the nodes that run on the driver."""

    groups: dict[str, WorkerGroup]
    driver_nodes: list[str]
    cluster: Cluster

    def group_of(self, node: str) -> WorkerGroup | None:
        """The worker group running `node`, or None for the driver."""
        for group in self.groups.values():
            if node in group.nodes:
                return group
        return None


def local_cluster(num_cpus: int | None = None, num_gpus: int | None = None) -> Cluster:
    """This machine as an embedded Ray would see it."""
    cpus = num_cpus if num_cpus is not None else os.cpu_count() or 1
    if num_gpus is None:
        num_gpus = sum(1 for d in os.listdir("/dev") if d[6:].isdigit() and d.startswith("nvidia"))
    return Cluster((ClusterNode("local", float(cpus), float(num_gpus)),), "local machine")


def _colocated_sets(spec: PipelineSpec, where: str) -> list[tuple[str, ...]]:
    pools = spec.pools.named
    seen: set[str] = set()
    sets = []
    for i, members in enumerate(spec.pools.colocate):
        path = f"pools.colocate.{i}"
        for name in members:
            if name not in pools:
                raise PlacementError(
                    f"unknown pool {name!r} (pools: {', '.join(pools)})", path=path, where=where
                )
            if name in seen:
                raise PlacementError(
                    f"pool {name!r} is in two colocate sets", path=path, where=where
                )
            seen.add(name)
        if len(members) < 2:
            raise PlacementError("a colocate set needs at least two pools", path=path, where=where)
        if len({pools[m].workers for m in members}) > 1:
            counts = ", ".join(f"{m}.workers={pools[m].workers}" for m in members)
            raise PlacementError(
                f"colocated pools must have equal workers ({counts})", path=path, where=where
            )
        sets.append(tuple(members))
    return sets + [(p,) for p in pools if p not in seen]


def _group(members: tuple[str, ...], spec: PipelineSpec) -> WorkerGroup:
    pools: list[PoolSpec] = [spec.pools.named[m] for m in members]
    strategies = {p.strategy for p in pools}
    strategy = pools[0].strategy if len(strategies) == 1 else PlacementStrategy.PACK
    return WorkerGroup(
        name="+".join(members),
        pools=members,
        workers=pools[0].workers,
        cpus=max(p.cpus_per_worker for p in pools),
        gpus=max(p.gpus_per_worker for p in pools),
        strategy=strategy,
        max_concurrency=max(p.max_concurrency for p in pools),
    )


def _check_node(graph: Graph, name: str, group: WorkerGroup, where: str) -> None:
    node = graph.nodes[name]
    limit = node.op.max_workers
    if limit is not None and group.workers > limit:
        pool = node.pool
        raise PlacementError(
            f"node '{name}' (operator {node.op.name}) runs on at most {limit} worker(s); "
            f"pool {pool} has {group.workers}",
            path=f"pools.{pool}.workers",
            where=where,
        )
    if node.op.companion_pool is None:
        _check_concurrency(graph, name, group, group, where)


def _check_concurrency(
    graph: Graph, name: str, runs: WorkerGroup, bound: WorkerGroup, where: str
) -> None:
    """The node's calls at once over the workers of `runs` must fit the pool bound of `bound`
    (its own pool, or the companion pool its actors live on)."""
    node = graph.nodes[name]
    per_worker = node.op.concurrency(node.params) if node.op.concurrency else None
    if bound.max_concurrency and per_worker is not None:
        total = per_worker * runs.workers
        if total > bound.max_concurrency:
            key = "max_concurrency" if node.op.companion_pool else "concurrency"
            raise PlacementError(
                f"{runs.workers} worker(s) x concurrency {per_worker} = {total} exceeds "
                f"pools.{bound.pools[0]}.max_concurrency={bound.max_concurrency}",
                path=f"nodes.{name}.params.{key}",
                where=where,
            )


def _fit(groups: list[WorkerGroup], cluster: Cluster, where: str) -> None:
    """Place every bundle on the cluster (first fit, largest groups first) or raise."""
    free = {n.name: [n.cpus, n.gpus] for n in cluster.nodes}

    def fits(node: str, g: WorkerGroup, count: int = 1) -> bool:
        cpu, gpu = free[node]
        return cpu + 1e-9 >= g.cpus * count and gpu + 1e-9 >= g.gpus * count

    def take(node: str, g: WorkerGroup, count: int = 1) -> None:
        free[node][0] -= g.cpus * count
        free[node][1] -= g.gpus * count

    for g in sorted(groups, key=lambda g: (g.gpus * g.workers, g.cpus * g.workers), reverse=True):
        ok = True
        if g.strategy == PlacementStrategy.STRICT_PACK:
            node = next((n for n in free if fits(n, g, g.workers)), None)
            ok = node is not None
            if ok:
                take(node, g, g.workers)
        elif g.strategy == PlacementStrategy.STRICT_SPREAD:
            nodes = [n for n in free if fits(n, g)][: g.workers]
            ok = len(nodes) == g.workers
            for n in nodes if ok else []:
                take(n, g)
        else:
            for _ in range(g.workers):
                node = next((n for n in free if fits(n, g)), None)
                if node is None:
                    ok = False
                    break
                take(node, g)
        if not ok:
            left = "; ".join(f"{n}: {c:g} CPU, {gp:g} GPU free" for n, (c, gp) in free.items())
            raise PlacementError(
                f"pool {g.name} asks for {g.workers} worker(s) x {g.cpus:g} CPU, {g.gpus:g} GPU "
                f"({g.strategy.value}); {cluster.describe()} has {left} after the other pools",
                path=f"pools.{g.pools[0]}",
                where=where,
            )


def plan_placement(
    spec: PipelineSpec, graph: Graph, cluster: Cluster, where: str = ""
) -> Placement:
    """Resolve pools into worker groups for the nodes of `graph` and check they fit."""
    groups = {g.name: g for g in (_group(m, spec) for m in _colocated_sets(spec, where))}
    driver: list[str] = []
    for name, node in graph.nodes.items():
        if node.pool == PoolName.driver:
            driver.append(name)
            continue
        group = next(g for g in groups.values() if node.pool in g.pools)
        group.nodes.append(name)
        if node.op.companion_pool is not None:
            pool = node.op.companion_pool
            next(g for g in groups.values() if pool in g.pools).companions.append(name)
    used = {k: g for k, g in groups.items() if g.nodes or g.companions}
    if spec.async_.mode is AsyncMode.continuous:
        for group in used.values():
            if any(graph.nodes[n].op.continuous for n in group.nodes):
                # k + 1 overlapping steps, a weight load and a digest query at once
                group.actor_calls = spec.async_.max_staleness + 3
    for group in used.values():
        for name in group.nodes:
            _check_node(graph, name, group, where)
        for name in group.companions:
            runs = next(g for g in used.values() if name in g.nodes)
            _check_concurrency(graph, name, runs, group, where)
    _fit(list(used.values()), cluster, where)
    return Placement(used, driver, cluster)
