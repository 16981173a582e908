"""A pipeline `rldag run` has loaded, built and placed already, handed to the flow it starts
in this process, so the flow does not do it again. Process-local: a deployment's flow run
(another process) finds nothing here and loads the pipeline itself, once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from rldag.compute.placement import Placement
from rldag.config.spec import LoadedPipeline
from rldag.engine.stop import StopRequest
from rldag.graph.dag import Graph


@dataclass(frozen=True)
class Prepared:
    """The validated pipeline, its graph and, with Ray, the placement checked on the cluster
    the run expects (None without Ray); the stop request its signals set (`rldag run` owns
    the process's SIGTERM and SIGINT; a deployment's flow run leaves them to Prefect)."""

    loaded: LoadedPipeline
    graph: Graph
    placement: Placement | None
    stop: StopRequest | None = None


_PREPARED: dict[tuple[str, tuple[str, ...]], Prepared] = {}
_LOCK = threading.Lock()


def keep(pipeline: str, overrides: Sequence[str], prepared: Prepared) -> None:
    """Keep `prepared` for the flow that runs `pipeline` with `overrides`."""
    with _LOCK:
        _PREPARED[(pipeline, tuple(overrides))] = prepared


def take(pipeline: str, overrides: Sequence[str]) -> Prepared | None:
    """The pipeline kept for `pipeline` with `overrides` (once), or None."""
    with _LOCK:
        return _PREPARED.pop((pipeline, tuple(overrides)), None)
