"""One model turn for one episode, on the engine the node uses, called from many episodes'
threads at once so that their turns batch together.

In process the ``TorchEngine`` runs behind an ``EngineLoop`` (its continuous batcher on one
thread: a turn submitted while others decode joins the running batch); on rollout servers each
turn is one ``/generate`` request, batched by the server the same way, on the server of the
episode's first turn, which reuses its cache (``RolloutClient.turn``). ``submit`` is the
non-blocking form (a future of ``n`` completions), for callers on an event loop (the gateway).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from operators.rollout.engine_loop import EngineLoop, GenerateItem
from operators.rollout.sampling import Completion, SamplingParams


class LoopTurns:
    """Turns on an in-process engine through an ``EngineLoop`` (closed after the call)."""

    def __init__(self, engine: Any, version: int) -> None:
        self.engine = engine
        self.loop = EngineLoop(engine, weight_version=str(version))

    def submit(
        self, ids: list[int], params: SamplingParams, seed: int, key: str | None
    ) -> Future[tuple[list[list[Completion]], str]]:
        """A future of ``([params.n completions], version)``; with ``key`` (and ``n`` 1) the
        engine keeps the cache for the episode's next turn, which then prefills only what the
        turn and the environment added."""
        return self.loop.generate([GenerateItem(ids, params, seed, 0, cache_key=key)])

    def sample(
        self, ids: list[int], params: SamplingParams, seed: int, timeout_s: float | None, key: str
    ) -> tuple[Completion, int]:
        """One turn of episode ``key`` (see ``submit``)."""
        results, version = self.submit(ids, params, seed, key).result(timeout=timeout_s)
        return results[0][0], int(version)

    def release(self, key: str) -> None:
        """Episode ``key`` ended: its kept cache is dropped."""
        self.loop.release(key)

    def close(self) -> None:
        self.loop.close()
        self.engine.batcher.abort_all()  # turns of episodes that timed out
        self.engine.batcher.kept.clear()  # and their kept caches
        self.engine.batcher.weight_version = None


class ServerTurns:
    """Turns on rollout servers (ours or SGLang) through the node's ``RolloutService``."""

    def __init__(self, service: Any, workers: int = 16) -> None:
        self.service = service
        self.pool: ThreadPoolExecutor | None = None  # for `submit` (made on first use)
        self.workers = workers

    def _request(
        self, ids: list[int], params: SamplingParams, seed: int, key: str | None
    ) -> tuple[list[list[Completion]], str]:
        if key is None:
            ((completions, version),) = self.service.generate([ids], params, [seed])
        else:  # the episode's server, which has its conversation cached
            completions, version = self.service.client.turn(ids, params, seed, key)
        return [completions], str(version)

    def submit(
        self, ids: list[int], params: SamplingParams, seed: int, key: str | None
    ) -> Future[tuple[list[list[Completion]], str]]:
        """A future of ``([params.n completions], version)`` (a request on a worker thread)."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.workers, "rldag-server-turn")
        return self.pool.submit(self._request, ids, params, seed, key)

    def sample(
        self, ids: list[int], params: SamplingParams, seed: int, timeout_s: float | None, key: str
    ) -> tuple[Completion, int]:
        (completions,), version = self._request(ids, replace(params, n=1), seed, key)
        return completions[0], int(version)

    def release(self, key: str) -> None:
        """Episode ``key`` ended: its server drops the cache it kept for it."""
        self.service.client.close_session(key)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
