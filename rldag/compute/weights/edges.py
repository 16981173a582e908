"""Weights edges between split Ray worker groups that broadcast over a torch.distributed
group of their own (rldag.compute.weights.broadcast): formed once per pair of groups, on first use,
with Ray's object store as the fallback under `weights.transport: auto`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rldag.config.errors import DeadlineExceeded, PlacementError
from rldag.config.weights import WeightsSpec, WeightsTransport
from rldag.graph.dag import Node

if TYPE_CHECKING:  # annotations only (handles -> worker -> this package)
    from rldag.compute.handles import WorkerHandle

log = logging.getLogger("rldag.pools")


class BroadcastEdges:
    """Which worker-group pairs broadcast their weights, and the broadcast itself."""

    def __init__(self, spec: WeightsSpec) -> None:
        self.spec = spec
        self._formed: dict[str, bool] = {}  # edge -> True: collective, False: object store

    def usable(
        self, edge: str, senders: Sequence[WorkerHandle], receivers: Sequence[WorkerHandle]
    ) -> bool:
        """Whether `edge` broadcasts; forms its group (trainer rank 0 + every receiver) on
        the first call. Under `auto` a group that cannot form falls back to the object
        store with a warning; under `collective` it is an error."""
        if self.spec.transport == WeightsTransport.object_store:
            return False
        if edge not in self._formed:
            self._formed[edge] = self._form(edge, senders[0], receivers)
        return self._formed[edge]

    def _form(self, edge: str, sender: WorkerHandle, receivers: Sequence[WorkerHandle]) -> bool:
        import ray

        start = time.perf_counter()
        members = [sender, *receivers]
        timeout = self.spec.timeout_s
        try:
            gpus = ray.get([w.weight_device.remote() for w in members])
            # NCCL needs a GPU per member; members sharing a GPU (or without one) use gloo.
            backend = "nccl" if all(gpus) and len(set(gpus)) == len(gpus) else "gloo"
            host, port = ray.get(sender.open_weight_group.remote(edge, timeout))
            size = len(members)
            joins = [
                w.join_weight_group.remote(edge, host, port, rank, size, backend, timeout)
                for rank, w in enumerate(members)
            ]
            ray.get(joins, timeout=timeout)
        except Exception as err:  # any failure to connect: refused port, timeout, no NCCL
            if self.spec.transport == WeightsTransport.collective:
                raise PlacementError(
                    f"the weight broadcast group {edge} could not form: {err}; set "
                    "weights.transport to auto or object_store",
                    path="weights.transport",
                ) from None
            log.warning("weights %s: broadcast group did not form (%s); object store", edge, err)
            return False
        log.info(
            "weights %s: %s broadcast group of %d formed in %.2fs",
            edge,
            backend,
            len(members),
            time.perf_counter() - start,
        )
        return True

    def sync(
        self,
        edge: str,
        senders: Sequence[WorkerHandle],
        receivers: Sequence[WorkerHandle],
        source: Node,
        target: Node,
        version: int,
    ) -> None:
        """Every sender gathers the full weights, the group's rank 0 broadcasts them and
        every receiver loads them as `version`."""
        import ray

        bucket_bytes = self.spec.bucket_mb << 20
        sends = [w.send_weights.remote(source, edge, bucket_bytes) for w in senders]
        loads = [w.receive_weights.remote(target, edge, version) for w in receivers]
        try:
            ray.get(loads + sends, timeout=self.spec.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise DeadlineExceeded(
                f"the weight broadcast {edge} (version {version}) did not finish within "
                f"weights.timeout_s = {self.spec.timeout_s:g} s"
            ) from None
