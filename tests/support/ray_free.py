"""Counting the calls of a function wherever it was imported, and Ray's pools replaced by
in-process ones with the same placement (the planning is what these tests watch)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from rldag.compute import ray_pools
from rldag.compute.in_process import InProcessPools
from rldag.compute.placement import Cluster, Placement


def count_calls(monkeypatch: pytest.MonkeyPatch, function: Callable) -> list[tuple]:
    """Replace `function` in every loaded module that holds it; the list of calls' args. A
    module imported later copies the wrapper for good: import it before."""
    calls: list[tuple] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return function(*args, **kwargs)

    for module in list(sys.modules.values()):
        for name, value in list(vars(module).items() if module else ()):
            if value is function:
                monkeypatch.setattr(module, name, counted)
    return calls


class InProcessRayPools(InProcessPools):
    """RayPools' constructor, running everything in this process."""

    def __init__(self, placement: Placement, weights: object = None, faults: object = None):
        super().__init__()
        self.placement = placement

    def build_all(self, graph: object) -> None:
        return None


def without_ray(monkeypatch: pytest.MonkeyPatch, cluster: Callable[[], Cluster]) -> None:
    """start_pools with no Ray: `cluster()` is what it finds, its pools run in-process."""
    monkeypatch.setattr(ray_pools, "connect", lambda ray_spec: None)
    monkeypatch.setattr(ray_pools, "ray_cluster", cluster)
    monkeypatch.setattr(ray_pools, "RayPools", InProcessRayPools)
