"""Typed handles of the pool workers' Ray actors: what a call through a handle takes and
gives back, checked against PoolWorker itself (tests/core/compute/test_handles.py) so that a
renamed or re-typed worker method fails the fast tests, not a Ray run.

`start_worker` is the one place a PoolWorker actor is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import pyarrow as pa

from rldag.compute.placement import WorkerGroup
from rldag.compute.remote import Remote, StreamingRemote
from rldag.compute.worker import ChunkReply, ConsumeReply, PoolWorker, RunReply, Selection
from rldag.graph.dag import Node
from rldag.graph.operator import NodeContext

RowArgs = [Node, Mapping[str, pa.Table], NodeContext, str | None, pa.Table | None, Selection]


class WorkerHandle(Protocol):
    """A PoolWorker actor, as its callers see it (each member: one method of PoolWorker)."""

    rendezvous_address: Remote[[], tuple[str, int]]
    set_master: Remote[[str, int, float], None]
    pid: Remote[[], int]
    build: Remote[[Node], None]
    run: Remote[RowArgs, RunReply]
    stream: StreamingRemote[RowArgs, ChunkReply]
    consume: Remote[[Node, Mapping[str, pa.Table], NodeContext], ConsumeReply]
    finish: Remote[[Node, NodeContext], RunReply]
    policy_version: Remote[[Node], int]
    export_weights: Remote[[Node], dict[str, Any]]
    load_weights: Remote[[Node, dict[str, Any], int], float]
    sync_local: Remote[[Node, Node], int]
    weight_device: Remote[[], str]
    open_weight_group: Remote[[str, float], tuple[str, int]]
    join_weight_group: Remote[[str, str, int, int, int, str, float], None]
    send_weights: Remote[[Node, str, int], None]
    receive_weights: Remote[[Node, str, int], float]
    weights_digest: Remote[[Node], str]
    save_checkpoint: Remote[[Node, str], None]
    load_checkpoint: Remote[[Node, str], None]
    export_hf: Remote[[Node, str], None]
    close: Remote[[], None]


def start_worker(group: WorkerGroup, rank: int, scheduling_strategy: object) -> WorkerHandle:
    """The worker actor of `rank` in `group` (its bundle's CPUs and GPUs), placed by
    `scheduling_strategy` (its bundle of the group's placement group)."""
    import ray

    actor = ray.remote(PoolWorker).options(
        num_cpus=group.cpus,
        num_gpus=group.gpus,
        scheduling_strategy=scheduling_strategy,
        max_concurrency=group.actor_calls,  # > 1: a threaded actor
    )
    return cast(WorkerHandle, actor.remote(group.name, rank, group.workers))
