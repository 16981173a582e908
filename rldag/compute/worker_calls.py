"""Calls on the actors of the pools' worker groups, each within its deadline
(`faults.node_timeout_s`), and what happens to a worker whose process died or that did not
answer in time: a stateless group's worker is replaced and its call re-run (up to
`faults.max_restarts` per run); a stateful group's stops the run, resumable."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from rldag.compute.handles import WorkerHandle
from rldag.compute.placement import WorkerGroup
from rldag.config.errors import DeadlineExceeded
from rldag.config.faults import FaultsSpec

log = logging.getLogger("rldag.pools")
RESUME = "`rldag run --resume RUN_ID` continues from the last checkpoint"


class WorkerLost(RuntimeError):
    """A pool worker's process died and its call cannot be re-run."""


class WorkerCalls:
    """The worker actors of every group, the calls made on them and their restarts."""

    def __init__(self, faults: FaultsSpec, spawn: Callable[[WorkerGroup, int], WorkerHandle]):
        self.timeout_s = faults.node_timeout_s
        self.restarts_left = faults.max_restarts
        self.workers: dict[str, list[WorkerHandle]] = {}
        self.stateful: set[str] = set()  # groups hosting a stateful operator
        self.abandoned = False  # a stopping run gave up its calls: no worker is replaced
        self._spawn = spawn

    def get(self, refs: Any, what: str) -> Any:
        """`ray.get(refs)` of a control call (versions, weights, checkpoints: they queue
        behind the node call on the same actor) within the deadline; DeadlineExceeded naming
        `what` otherwise."""
        import ray

        try:
            return ray.get(refs, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise DeadlineExceeded(f"{what} {self._late()}; {RESUME}") from None

    def wait(self, refs: list, what: str) -> None:
        """Wait until every ref is ready (not fetching it here) within the deadline."""
        import ray

        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s, fetch_local=False)
        if len(ready) < len(refs):
            raise DeadlineExceeded(f"{what} {self._late()}; {RESUME}")

    def gather(self, node: str, group: WorkerGroup, calls: Sequence[Callable]) -> list:
        """Each worker's result of `calls[rank](worker)`, within the deadline. A worker whose
        process died, or that did not answer in time (it is killed), is replaced when its
        group holds no state and its call re-run there with a deadline of its own."""
        import ray

        workers = self.workers[group.name]
        refs = [call(w) for call, w in zip(calls, workers, strict=False)]
        deadlines = [time.monotonic() + self.timeout_s] * len(refs)
        results: list = [None] * len(refs)
        for rank in range(len(refs)):
            while True:
                try:
                    left = max(0.0, deadlines[rank] - time.monotonic())
                    results[rank] = ray.get(refs[rank], timeout=left)
                    break
                except ray.exceptions.RayActorError as err:
                    where = f"the process of pool worker {group.name}[{rank}] died"
                    self._replace(node, group, rank, f"{where} ({type(err).__name__})")
                except ray.exceptions.GetTimeoutError:
                    ray.kill(workers[rank], no_restart=True)
                    where = f"pool worker {group.name}[{rank}] {self._late()} (it was killed)"
                    self._replace(node, group, rank, where, DeadlineExceeded)
                refs[rank] = calls[rank](workers[rank])
                deadlines[rank] = time.monotonic() + self.timeout_s
        return results

    def deadline(self) -> float:
        """The monotonic time by which a node call started now must have answered."""
        return time.monotonic() + self.timeout_s

    def late(self, group: WorkerGroup, ranks: Sequence[int]) -> DeadlineExceeded:
        """The error of a streamed node call that passed its deadline (its workers killed)."""
        import ray

        for rank in ranks:
            ray.kill(self.workers[group.name][rank], no_restart=True)
        names = ", ".join(f"{group.name}[{rank}]" for rank in ranks)
        return DeadlineExceeded(f"pool worker {names} {self._late()} (killed); {RESUME}")

    def _late(self) -> str:
        return f"did not answer within faults.node_timeout_s = {self.timeout_s:g} s"

    def _replace(
        self,
        node: str,
        group: WorkerGroup,
        rank: int,
        where: str,
        error: type[Exception] = WorkerLost,
    ) -> None:
        """Start a new worker for a dead or killed one of a stateless group, or raise
        `error` saying `where`."""
        if self.abandoned:
            raise error(f"{where}: the run is stopping and gave up its work") from None
        if group.name in self.stateful:
            raise error(
                f"{where}; it held the state of a stateful operator, so the run stops: {RESUME}"
            ) from None
        if self.restarts_left <= 0:
            raise error(f"{where}; no restarts left (faults.max_restarts): {RESUME}") from None
        self.restarts_left -= 1
        log.warning("%s in node %s: restarting it, re-running its rows", where, node)
        self.workers[group.name][rank] = self._spawn(group, rank)
