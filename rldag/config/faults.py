"""The `faults:` section of pipeline.yaml: worker restarts, Prefect outages and restarts, how
long a stopping run waits, and the deadlines of waits on services (docs: Faults and
recovery)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from rldag.config.errors import SpecError


@dataclass
class FaultsSpec:
    """What a run does when a pool worker's process dies, the Prefect server or the object
    store is away or the run is asked to stop (docs: Faults and recovery)."""

    max_restarts: int = 3  # per run: stateless workers restarted (and their call re-run)
    prefect_outage_s: float = 120.0  # how long a run waits for an unreachable Prefect API
    # seconds one Prefect API request waits for its answer (PREFECT_API_REQUEST_TIMEOUT)
    prefect_request_timeout_s: float = 60.0
    # the Prefect server `rldag run` starts restarts after an iteration past this RSS (MB; 0: never)
    prefect_server_max_rss_mb: float = 1024.0
    # on SIGTERM, SIGINT or a cancel: seconds the steps of an iteration that can still finish get
    stop_grace_s: float = 30.0
    # s3: seconds one attempt of a request waits to connect, and then for each answer
    storage_timeout_s: float = 20.0
    # seconds one node's call on its Ray pool workers (and each control call on them, and
    # the trainer's own collectives) may take before its workers are killed
    node_timeout_s: float = 7200.0


# the environment variable pool workers read `node_timeout_s` from, for torch.distributed
COLLECTIVE_TIMEOUT = "RLDAG_COLLECTIVE_TIMEOUT_S"
# a deadline of 0 would never end
POSITIVE = ("prefect_request_timeout_s", "storage_timeout_s", "node_timeout_s")


def check_faults(faults: FaultsSpec, where: str) -> None:
    """Every `faults.*` value is >= 0 and every deadline > 0; a SpecError naming the key
    otherwise."""
    for key in (f.name for f in fields(faults)):
        value = getattr(faults, key)
        if value < 0 or (key in POSITIVE and value == 0):
            bound = "> 0" if key in POSITIVE else ">= 0"
            raise SpecError(f"must be {bound}, got {value}", path=f"faults.{key}", where=where)
