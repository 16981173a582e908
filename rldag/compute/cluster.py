"""Joining Ray, or starting an embedded one, and reading the cluster it gives (the nodes the
placement plans on)."""

from __future__ import annotations

import logging

from rldag.compute.placement import Cluster, ClusterNode
from rldag.config.spec import RaySpec

# The embedded Ray has no dashboard, so nothing reads the per-task records its GCS would keep
# (up to 100k tasks; +1-1.4 MB per 100 iterations of the default pipeline in bench/soak.py).
EMBEDDED_RAY_CONFIG = {"task_events_report_interval_ms": 0}


def connect(ray_spec: RaySpec) -> None:
    """Join `ray.address`, or start an embedded local Ray when none is given (always a new
    one: Ray would otherwise join a cluster that `ray start` left on this machine; without
    task events, EMBEDDED_RAY_CONFIG)."""
    import ray

    if ray.is_initialized():
        return
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
