"""`rldag plan --auto`: search placements of a pipeline (which pools share workers, workers
per pool, the staleness bound k) under a cluster, predict each with the simulator from a
cost model, and rank them. Every candidate is a set of OmegaConf overrides that goes through
the same checks as `rldag run` (spec, graph, the overlap rule, placement fit) plus a memory
check per worker from the model's size; `--apply` writes the chosen one as a file.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rldag.compute.placement import Cluster, ClusterNode, plan_placement
from rldag.config.errors import InputError, PlacementError
from rldag.config.spec import LoadedPipeline, NodeKind, PipelineSpec, PoolSpec
from rldag.graph.dag import Graph
from rldag.planning.costs import CostModel
from rldag.planning.simulator import DRIVER, SimPlan, SimResult, simulate

TRAIN_BYTES_PER_PARAM = 16.0  # bf16 weights and grads, fp32 master weights and Adam moments
ROLLOUT_BYTES_PER_PARAM = 2.0  # bf16 weights
ROLLOUT_KV_SHARE = 0.3  # of a rollout worker's memory kept for the KV cache
DEFAULT_GPU_MEMORY_GB = 80.0
SMALL_CLUSTER = 8  # up to this many workers every count is tried, above only powers of two


def declared_pools(spec: PipelineSpec) -> dict[str, PoolSpec]:
    """Every pool the spec declares, by name (the built-in ones and any named `pools.<x>`)."""
    pools = spec.pools
    items = pools.items() if isinstance(pools, Mapping) else vars(pools).items()
    out: dict[str, PoolSpec] = {}
    for name, value in items:
        if isinstance(value, PoolSpec):
            out[name] = value
        elif isinstance(value, Mapping):
            out |= {k: v for k, v in value.items() if isinstance(v, PoolSpec)}
    return out


def colocate_sets(spec: PipelineSpec) -> list[tuple[str, ...]]:
    """The `pools.colocate` sets."""
    sets = getattr(spec.pools, "colocate", None) or []
    return [tuple(s) for s in sets]


def node_pool(graph: Graph, name: str) -> str:
    return str(getattr(graph.nodes[name].pool, "value", graph.nodes[name].pool))


def used_pools(graph: Graph) -> list[str]:
    """Pools (not the driver) that run at least one node, in graph order."""
    return list(dict.fromkeys(p for n in graph.order if (p := node_pool(graph, n)) != DRIVER))


def sim_plan(loaded: LoadedPipeline, graph: Graph) -> SimPlan:
    """What the simulator needs to know of a loaded pipeline's placement."""
    spec = loaded.spec
    pools = declared_pools(spec)
    group_of = {p: "+".join(s) for s in colocate_sets(spec) for p in s}
    groups, workers = {}, {}
    for name in graph.order:
        pool = node_pool(graph, name)
        group = DRIVER if pool == DRIVER else group_of.get(pool, pool)
        groups[name] = group
        if pool in pools:
            workers[group] = pools[pool].workers
    split = False
    for name, node in graph.nodes.items():
        if node.weights_from:
            split = groups[name] != groups[node.weights_from]
    return SimPlan(groups, workers, spec.async_.max_staleness, spec.async_.chunk_groups, split)


def partitions(items: list[str]) -> Iterable[list[tuple[str, ...]]]:
    """Every way to group `items` into sets that share workers (set partitions)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        yield [(first,), *part]
        for i, block in enumerate(part):
            yield [*part[:i], (first, *block), *part[i + 1 :]]


def parse_cluster(text: str) -> Cluster:
    """A declared cluster: `NxMgpu` (N machines with M GPUs), `NxCcpu`, or `NxMgpuCcpu`;
    without a CPU count a GPU machine has 8 CPUs per GPU."""
    import re

    m = re.fullmatch(r"(\d+)x(?:(\d+)gpu)?(?:(\d+)cpu)?", text.strip().lower())
    if not m or (m.group(2) is None and m.group(3) is None):
        raise InputError(
            f"cannot read cluster {text!r}: expected NxMgpu, NxCcpu or NxMgpuCcpu (e.g. 8x8gpu)",
            path="--cluster",
        )
    count, gpus = int(m.group(1)), float(m.group(2) or 0)
    cpus = float(m.group(3)) if m.group(3) is not None else max(8.0, 8 * gpus)
    if count < 1:
        raise InputError(f"cluster {text!r} has no machines", path="--cluster")
    nodes = tuple(ClusterNode(f"node{i}", cpus, gpus) for i in range(count))
    return Cluster(nodes, f"declared cluster {text}")


@dataclass(frozen=True)
class Candidate:
    """One placement to try: colocated sets, workers per pool, GPUs per worker, k."""

    colocate: tuple[tuple[str, ...], ...]
    workers: tuple[tuple[str, int], ...]  # pool -> workers
    gpus: tuple[tuple[str, float], ...]  # pool -> GPUs per worker (only where it changes)
    max_staleness: int

    def overrides(self) -> list[str]:
        """The OmegaConf dotlist that selects this placement."""
        sets = [list(s) for s in self.colocate if len(s) > 1]
        out = [f"pools.colocate={_yaml_list(sets)}"]
        out += [f"pools.{p}.workers={w}" for p, w in self.workers]
        out += [f"pools.{p}.gpus_per_worker={g:g}" for p, g in self.gpus]
        return [*out, f"async.max_staleness={self.max_staleness}"]

    def describe_colocate(self) -> str:
        """`split` when no pools share workers, else the sets that do."""
        shared = ["+".join(s) for s in self.colocate if len(s) > 1]
        return ", ".join(shared) or "split"


def _yaml_list(sets: list[list[str]]) -> str:
    return "[" + ",".join("[" + ",".join(s) + "]" for s in sets) + "]"


@dataclass
class Ranked:
    """A candidate that fits, with its prediction."""

    candidate: Candidate
    result: SimResult
    memory_gb: dict[str, float]  # pool -> GB needed per worker


def gpu_pools(graph: Graph, spec: PipelineSpec) -> list[str]:
    """Pools that hold the model: they run a generate or train node, or already ask for GPUs."""
    pools = declared_pools(spec)
    out = []
    for pool in used_pools(graph):
        kinds = {graph.nodes[n].kind for n in graph.order if node_pool(graph, n) == pool}
        if kinds & {NodeKind.generate, NodeKind.train} or pools[pool].gpus_per_worker > 0:
            out.append(pool)
    return out


def worker_options(cluster: Cluster, per_worker_gpus: float) -> list[int]:
    """Worker counts worth trying: every count on a small cluster; else powers of two and
    whole machines' worth."""
    if per_worker_gpus > 0:
        most = int(sum(n.gpus for n in cluster.nodes) // per_worker_gpus)
        machine = int(max(n.gpus for n in cluster.nodes) // per_worker_gpus)
    else:
        most = int(sum(n.cpus for n in cluster.nodes))
        machine = int(max(n.cpus for n in cluster.nodes))
    most = max(1, most)
    if most <= SMALL_CLUSTER:
        return list(range(1, most + 1))
    powers = {2**i for i in range(most.bit_length()) if 2**i <= most}
    machines = set(range(machine, most + 1, machine)) if machine > 0 else set()
    return sorted(powers | machines | {most})


def memory_per_worker_gb(
    graph: Graph, pools: dict[str, int], colocate: list[tuple[str, ...]], params: int
) -> dict[str, float]:
    """GB a worker of each pool holds: a trainer its shard of weights, gradients and Adam
    state (16 bytes per parameter over its workers), a rollout engine a full bf16 copy plus
    its KV cache; colocated pools hold both on one worker."""
    own: dict[str, float] = {}
    for name in graph.order:
        node, pool = graph.nodes[name], node_pool(graph, name)
        if pool not in pools:
            continue
        if node.kind == NodeKind.train:
            need = TRAIN_BYTES_PER_PARAM * params / pools[pool]
        elif node.kind == NodeKind.generate:
            need = ROLLOUT_BYTES_PER_PARAM * params / (1 - ROLLOUT_KV_SHARE)
        else:
            need = 0.0
        own[pool] = own.get(pool, 0.0) + need / 1e9
    out = dict(own)
    for block in colocate:
        shared = sum(own.get(p, 0.0) for p in block)
        out |= {p: shared for p in block if p in own}
    return out


def worker_capacity_gb(
    cluster: Cluster, gpus: float, cpus: float, gpu_memory_gb: float, host_memory_gb: float
) -> float:
    """Memory a worker may use: its GPUs' memory, or its share of a machine's memory."""
    if gpus > 0:
        return gpus * gpu_memory_gb
    machine_cpus = max(n.cpus for n in cluster.nodes)
    return host_memory_gb * cpus / machine_cpus if machine_cpus else 0.0


Checker = Callable[[Candidate], str | None]  # why a candidate cannot run, or None


@dataclass(frozen=True)
class Limits:
    """What the search may choose and the memory a worker has."""

    max_staleness: int = 2  # the staleness bound: k from 0 to this
    gpu_memory_gb: float = DEFAULT_GPU_MEMORY_GB
    host_memory_gb: float = 0.0  # per machine, for CPU workers (0: not checked)
    iterations: int = 12  # simulated per candidate


@dataclass
class Search:
    """The ranked candidates that fit and, for the rest, why not."""

    ranked: list[Ranked]
    refused: list[tuple[Candidate, str]]


Loader = Callable[[list[str]], tuple[LoadedPipeline, Graph]]


def search(
    load: Loader, costs: CostModel, cluster: Cluster, limits: Limits, params: int = 0
) -> Search:
    """Try every grouping of the used pools, k up to the bound and worker counts the cluster
    can hold; keep what passes the pipeline's own checks, fits and has the memory."""
    base, graph = load([])
    pools = used_pools(graph)
    params = params or costs.params
    has_gpus = any(n.gpus > 0 for n in cluster.nodes)
    model_pools = set(gpu_pools(graph, base.spec))
    ranked, refused = [], []
    for blocks in partitions(pools):
        for k in range(limits.max_staleness + 1):
            shape = Candidate(tuple(blocks), (), (), k)
            try:
                loaded, g = load(shape.overrides())
            except InputError as err:  # e.g. k > 0 with generate and train sharing workers
                refused.append((shape, err.message))
                continue
            declared = declared_pools(loaded.spec)
            gpus = {p: _gpus(declared[p], p in model_pools, has_gpus) for p in pools}
            options = [worker_options(cluster, gpus[b[0]]) for b in blocks]
            for counts in itertools.product(*options):
                workers = {p: w for b, w in zip(blocks, counts, strict=True) for p in b}
                candidate = Candidate(
                    tuple(blocks),
                    tuple(workers.items()),
                    tuple((p, v) for p, v in gpus.items() if v != declared[p].gpus_per_worker),
                    k,
                )
                found = _evaluate(candidate, loaded, g, costs, cluster, limits, params)
                if isinstance(found, Ranked):
                    ranked.append(found)
                else:
                    refused.append((candidate, found))
    ranked.sort(key=_rank_key)
    return Search(ranked, refused)


def _rank_key(r: Ranked) -> tuple[float, float, int]:
    """Fastest first; among equals the fewest devices, then the smallest k."""
    c = r.candidate
    gpus = dict(c.gpus)
    size = sum(w * (1 + gpus.get(p, 0.0)) for p, w in c.workers)
    return (-round(r.result.samples_per_s, 6), size, c.max_staleness)


def _gpus(pool: PoolSpec, holds_model: bool, has_gpus: bool) -> float:
    """GPUs per worker on this cluster: one per model-holding worker where there are GPUs,
    none where there are not, else what the pool asks."""
    if not has_gpus:
        return 0.0
    if holds_model and pool.gpus_per_worker == 0:
        return 1.0
    return pool.gpus_per_worker


def _evaluate(
    candidate: Candidate,
    loaded: LoadedPipeline,
    graph: Graph,
    costs: CostModel,
    cluster: Cluster,
    limits: Limits,
    params: int,
) -> Ranked | str:
    """The candidate's prediction, or why it cannot run: the placement fit of `rldag plan`
    and the memory per worker."""
    spec = copy.deepcopy(loaded.spec)
    declared = declared_pools(spec)
    gpus = dict(candidate.gpus)
    for pool, workers in candidate.workers:
        declared[pool].workers = workers
        declared[pool].gpus_per_worker = gpus.get(pool, declared[pool].gpus_per_worker)
    try:
        plan_placement(spec, graph, cluster, loaded.source)
    except PlacementError as err:
        return err.message
    workers = dict(candidate.workers)
    memory = memory_per_worker_gb(graph, workers, list(candidate.colocate), params)
    for pool, need in memory.items():
        p = declared[pool]
        host = limits.host_memory_gb
        if p.gpus_per_worker == 0 and not host:
            continue
        have = worker_capacity_gb(
            cluster, p.gpus_per_worker, p.cpus_per_worker, limits.gpu_memory_gb, host
        )
        if need > have:
            return f"pool {pool}: a worker needs {need:.1f} GB for the model, has {have:.1f} GB"
    view = LoadedPipeline(spec, loaded.resolved_yaml, loaded.source)
    result = simulate(graph, costs, sim_plan(view, graph), limits.iterations)
    return Ranked(candidate, result, memory)
