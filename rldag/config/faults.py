"""The `faults:` section of pipeline.yaml: worker restarts, Prefect outages and restarts, and
how long a stopping run waits (docs: Faults and recovery)."""

from __future__ import annotations

from dataclasses import dataclass

from rldag.config.errors import SpecError


@dataclass
class FaultsSpec:
    """What a run does when a pool worker's process dies, the Prefect server is away or the run
    is asked to stop (docs: Faults and recovery)."""

    max_restarts: int = 3  # per run: stateless workers restarted (and their call re-run)
    prefect_outage_s: float = 120.0  # how long a run waits for an unreachable Prefect API
    # the Prefect server `rldag run` starts restarts after an iteration past this RSS (MB; 0: never)
    prefect_server_max_rss_mb: float = 1024.0
    # on SIGTERM, SIGINT or a cancel: seconds the steps of an iteration that can still finish get
    stop_grace_s: float = 30.0


def check_faults(faults: FaultsSpec, where: str) -> None:
    """Every `faults.*` value is >= 0; a SpecError naming the key otherwise."""
    for key in ("max_restarts", "prefect_outage_s", "prefect_server_max_rss_mb", "stop_grace_s"):
        if (value := getattr(faults, key)) < 0:
            raise SpecError(f"must be >= 0, got {value}", path=f"faults.{key}", where=where)
