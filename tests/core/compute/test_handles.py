"""The typed handles of the pool workers match PoolWorker itself, without Ray: every method
a handle calls exists with the same parameters (their annotations, in order, minus self)
and return type, and every public method of PoolWorker has its member in WorkerHandle."""

from __future__ import annotations

from typing import get_type_hints

from rldag.compute.handles import WorkerHandle
from rldag.compute.worker import PoolWorker
from tests.support.handles import mismatches, public_methods


def test_every_public_method_of_the_worker_has_a_handle_member():
    assert public_methods(PoolWorker) == set(get_type_hints(WorkerHandle))


def test_each_handle_member_has_the_worker_methods_types():
    assert mismatches(WorkerHandle, PoolWorker) == []
