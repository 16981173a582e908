"""Joining Ray, or starting an embedded one, and reading the cluster it gives (the nodes the
placement plans on); the cluster and placement a run would use, which `rldag plan` shows and
`rldag run` plans once (rldag.compute.ray_pools.start_pools reuses it)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rldag.compute.placement import Cluster, ClusterNode, Placement, local_cluster, plan_placement
from rldag.config.spec import LoadedPipeline, RaySpec
from rldag.graph.dag import Graph

# The embedded Ray has no dashboard, so nothing reads the per-task records its GCS would keep
# (up to 100k tasks; +1-1.4 MB per 100 iterations of the default pipeline in bench/soak.py).
EMBEDDED_RAY_CONFIG = {"task_events_report_interval_ms": 0}


def connect(ray_spec: RaySpec) -> None:
    """Join `ray.address`, or start an embedded local Ray when none is given (always a new
    one: Ray would otherwise join a cluster that `ray start` left on this machine; without
    task events, EMBEDDED_RAY_CONFIG). The process keeps its SIGTERM handler: `ray.init`
    would put its own in (`sys.exit` from whatever the main thread was doing), and a run
    that is asked to stop stops at a safe point instead (rldag.engine.stop)."""
    import ray

    if ray.is_initialized():
        return
    with _keeping_sigterm_handler():
        _init(ray_spec)


@contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _init(ray_spec: RaySpec) -> None:
    import ray

    if ray_spec.address:
        ray.init(address=ray_spec.address, logging_level=logging.WARNING)
    else:
        ray.init(
            address="local",
            num_cpus=ray_spec.num_cpus,
            num_gpus=ray_spec.num_gpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            _system_config=EMBEDDED_RAY_CONFIG,
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


def same_machines(a: Cluster, b: Cluster) -> bool:
    """Whether two clusters have the same machines (CPUs and GPUs of each), whatever their
    names: a placement planned on one fits the other alike."""

    def shape(cluster: Cluster) -> list[tuple[float, float]]:
        return sorted((n.cpus, n.gpus) for n in cluster.nodes)

    return shape(a) == shape(b)


def cluster_for(loaded: LoadedPipeline) -> Cluster:
    """The cluster a run would use: the Ray cluster at `ray.address`, else this machine."""
    ray_spec = loaded.spec.ray
    if ray_spec.enabled and ray_spec.address:
        connect(ray_spec)
        return ray_cluster()
    return local_cluster(ray_spec.num_cpus, ray_spec.num_gpus)


def placement_for(loaded: LoadedPipeline, graph: Graph) -> Placement:
    """Resolve and check the placement (PlacementError names the pool that cannot fit)."""
    return plan_placement(loaded.spec, graph, cluster_for(loaded), loaded.source)
