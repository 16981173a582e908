"""A thread that owns a ``TorchEngine`` and serves many callers: the rollout server's core.

Callers hand it work and get futures back; the thread runs the engine's continuous batcher, so
requests that arrive while others decode join the same batch at the next step. Control messages
(weight update, pause, continue) are handled in arrival order, between two steps. What a weight
update does to the requests in flight is its ``InFlight`` mode: ``finish`` them under the old
weights first (the default), ``abort`` them, ``retract`` them: load the new weights at once
and continue every sequence under them, its prompt and partial output re-prefilled, or
``keep`` them: load at once and continue on the caches as they are. While the
loop is paused an update never waits: the pause mode decided already (``retract``: caches are
recomputed on continue; ``in_place``: they are kept, as SGLang does). Every completion records
the weight versions that generated its tokens (``Completion.versions``).
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.rollout.sampling import Completion, SamplingParams
from operators.rollout.torch_engine import TorchEngine
from operators.rollout.weight_update import InFlight, PauseMode
from operators.rollout.weights import load_checkpoint

__all__ = ["EngineLoop", "GenerateItem"]

log = logging.getLogger("rldag.rollout")


@dataclass
class GenerateItem:
    """One prompt of a request and how to sample it."""

    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    index: int  # the prompt's index in its request (part of each sample's RNG key)
    cache_key: str | None = None  # keep the finished cache for the caller's next turn


@dataclass
class _Job:
    future: Future
    results: list[list[Completion] | None]
    remaining: int
    tickets: dict[int, int] = field(default_factory=dict)  # ticket -> item index
    single: bool = False  # its future gets the one item's completions (generate_each)


class EngineLoop:
    """Runs ``engine`` on a background thread; thread-safe ``generate`` and control calls."""

    def __init__(self, engine: TorchEngine, *, weight_version: str = "0") -> None:
        self.engine = engine
        engine.batcher.weight_version = weight_version
        self.model_path: str | None = None
        self.paused = False
        self._stale = False  # live caches predate the weights: refresh them before stepping
        self._inbox: queue.Queue[tuple[str, Any, Future]] = queue.Queue()
        self._jobs: dict[int, _Job] = {}  # ticket -> job
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollout-engine", daemon=True)
        self._thread.start()

    @property
    def weight_version(self) -> str:
        """The label of the weights now loaded."""
        return self.engine.batcher.weight_version

    # ---- callers -----------------------------------------------------------------------------

    def generate(self, items: list[GenerateItem]) -> Future:
        """Future of ``(completions per item, weight version)``."""
        return self._send("generate", items)

    def generate_each(self, items: list[GenerateItem]) -> list[Future]:
        """One future per item, of ``(its completions, weight version)``, each set as its group
        finishes: all items join the batch at the same step, as ``generate``'s do."""
        futures = [Future() for _ in items]
        self._inbox.put(("each", (items, futures), Future()))
        return futures

    def update_weights(
        self, source: str | dict, version: str | None, in_flight: InFlight = InFlight.finish
    ) -> Future:
        """Future of ``(success, message, requests held)`` for loading ``source``: a checkpoint
        directory, or a state dict (in process)."""
        return self._send("update", (source, version, InFlight(in_flight)))

    def pause(self, mode: PauseMode = PauseMode.abort) -> Future:
        """Stop stepping; ``abort`` also ends every in-flight request with finish reason abort,
        ``retract`` recomputes the in-flight caches on continue (under the weights then loaded),
        ``in_place`` keeps them."""
        return self._send("pause", PauseMode(mode))

    def release(self, cache_key: str) -> Future:
        """Drop the cache kept under ``cache_key`` (its caller has no more turns)."""
        return self._send("release", cache_key)

    def resume(self) -> Future:
        return self._send("continue", None)

    def close(self) -> None:
        self._stop.set()
        self._inbox.put(("stop", None, Future()))
        self._thread.join(timeout=10)

    def _send(self, kind: str, payload: Any) -> Future:
        future: Future = Future()
        self._inbox.put((kind, payload, future))
        return future

    # ---- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        batcher = self.engine.batcher
        while not self._stop.is_set():
            busy = batcher.has_work and not self.paused
            try:
                message = self._inbox.get(block=not busy, timeout=None if not busy else 0)
            except queue.Empty:
                message = None
            if message is not None:
                try:
                    self._handle(*message)
                except Exception as err:  # a bad message fails its caller, not the server
                    log.exception("rollout engine message failed")
                    if not message[2].done():
                        message[2].set_exception(err)
                continue  # drain every queued message before the next step
            if busy:
                try:
                    self._deliver(batcher.step())
                except Exception as err:  # fail the requests in flight, keep serving
                    log.exception("rollout engine step failed")
                    self._fail_all(err)

    def _fail_all(self, err: Exception) -> None:
        """Fail every pending request with ``err`` and clear the batcher."""
        try:
            self.engine.batcher.abort_all()
        except Exception:
            log.exception("could not abort the batcher after a failed step")
        for job in {id(j): j for j in self._jobs.values()}.values():
            if not job.future.done():
                job.future.set_exception(err)
        self._jobs.clear()

    def _handle(self, kind: str, payload: Any, future: Future) -> None:
        batcher = self.engine.batcher
        if kind == "generate":
            self._submit(_Job(future, [None] * len(payload), len(payload)), payload)
            if not payload:
                future.set_result(([], self.weight_version))
        elif kind == "each":
            items, futures = payload
            for item, each in zip(items, futures, strict=True):
                self._submit(_Job(each, [None], 1, single=True), [item])
            future.set_result(None)
        elif kind == "update":
            source, version, in_flight = payload
            state = load_checkpoint(source) if isinstance(source, str) else source
            held = self._settle(in_flight)
            self.engine.load_state_dict(state)
            if isinstance(source, str):
                self.model_path = str(Path(source))
            batcher.new_weights(None if version is None else str(version))
            self._stale |= in_flight is InFlight.retract
            if not self.paused:
                self._refresh()
            where = source if isinstance(source, str) else "a state dict"
            future.set_result((True, f"Succeeded to update model weights from {where}.", held))
        elif kind == "pause":
            self.paused = True
            if payload is PauseMode.abort:
                self._deliver(batcher.abort_all())
            self._stale |= payload is PauseMode.retract
            future.set_result(None)
        elif kind == "continue":
            self.paused = False
            self._refresh()
            future.set_result(None)
        elif kind == "release":
            batcher.release(payload)
            future.set_result(None)
        elif kind == "stop":
            future.set_result(None)

    def _submit(self, job: _Job, items: list[GenerateItem]) -> None:
        for i, item in enumerate(items):
            stop_ids = self.engine.stop_ids(item.params)
            ticket = self.engine.batcher.submit(
                item.prompt_ids, item.params, seed=item.seed, index=item.index,
                stop_ids=stop_ids, cache_key=item.cache_key,
            )  # fmt: skip
            job.tickets[ticket] = i
            self._jobs[ticket] = job

    def _settle(self, in_flight: InFlight) -> int:
        """Before new weights load: finish or abort what is in flight (``finish`` waits for
        nothing while paused). Returns how many requests were aborted or are retracted."""
        batcher = self.engine.batcher
        held = len({id(job) for job in self._jobs.values()})
        if in_flight is InFlight.abort:
            self._deliver(batcher.abort_all())
        elif in_flight is InFlight.finish:
            while batcher.has_work and not self.paused:
                self._deliver(batcher.step())
            held = 0
        return held

    def _refresh(self) -> None:
        """Recompute the live caches if the weights changed under them in ``retract`` mode (a
        failure fails the requests in flight, as a failed step does)."""
        if not self._stale:
            return
        self._stale = False
        try:
            self.engine.batcher.refresh()
        except Exception as err:
            log.exception("rollout engine could not recompute the caches in flight")
            self._fail_all(err)

    def _deliver(self, finished: list[tuple[int, list[Completion]]]) -> None:
        for ticket, completions in finished:
            job = self._jobs.pop(ticket)
            job.results[job.tickets[ticket]] = completions
            job.remaining -= 1
            if job.remaining == 0 and not job.future.done():
                results = job.results[0] if job.single else job.results
                job.future.set_result((results, self.weight_version))
