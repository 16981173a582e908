"""Where an agent's environments live: one instance per episode, in an ``EnvironmentHost``.

In process (no Ray) the host is an object of the rollout worker; on Ray the hosts are actors
on the environment pool's placement group (``ctx.companion``): a few actors (one per pool
worker unless ``env_workers`` says otherwise), each hosting many episodes' environments, with
``max_concurrency`` threads so that tool calls of different episodes run at the same time.
Every call is bounded by ``step_timeout_s``; a timeout or an exception is the caller's to
turn into a finish reason, never a failed run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from operators.generate.agent.deadline import CallTimeout, call_with_deadline
from operators.generate.agent.environment import (
    AssistantTurn,
    Environment,
    Message,
    OffersTools,
    StepResult,
)
from operators.generate.agent.factory import build_environment
from operators.generate.agent.params import AgentParams, EnvHosting
from operators.generate.agent.python_tool import close_sandboxes
from rldag import PoolReservation

log = logging.getLogger("rldag.ops")


class EnvironmentHost:
    """Many episodes' environments in one process, by episode key."""

    def __init__(self, params: AgentParams) -> None:
        self.params = params
        self._envs: dict[str, Environment] = {}

    def open(self, key: str, row: Mapping[str, Any]) -> tuple[list[Message], list[dict]]:
        """Build and reset the episode's environment: its first messages and tool schemas."""
        env = build_environment(self.params)
        self._envs[key] = env
        messages = env.reset(row)
        tools = env.tool_schemas() if isinstance(env, OffersTools) else []
        return messages, tools

    def step(self, key: str, turn: AssistantTurn) -> StepResult:
        return self._envs[key].step(turn)

    def close(self, key: str) -> None:
        env = self._envs.pop(key, None)
        if env is not None:
            env.close()

    def shutdown(self) -> None:
        for key in list(self._envs):
            try:
                self.close(key)
            except Exception:
                log.warning("closing environment %s failed", key, exc_info=True)
        close_sandboxes()

    def ready(self) -> bool:
        return True


class LocalHosts:
    """One in-process host."""

    def __init__(self, params: AgentParams) -> None:
        self.host = EnvironmentHost(params)

    def call(self, key: str, method: str, args: tuple, timeout_s: float) -> Any:
        return call_with_deadline(lambda: getattr(self.host, method)(key, *args), timeout_s)

    def shutdown(self) -> None:
        self.host.shutdown()


class RayHosts:
    """``EnvironmentHost`` actors in the environment pool's placement group."""

    def __init__(self, params: AgentParams, pool: PoolReservation) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        count = params.env_workers or pool.bundles
        per_bundle = math.ceil(count / pool.bundles)
        actor = ray.remote(EnvironmentHost)
        self.actors = [
            actor.options(
                num_cpus=pool.cpus / per_bundle,
                max_concurrency=2 * params.max_concurrency + 2,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pool.placement_group, placement_group_bundle_index=k % pool.bundles
                ),
            ).remote(params)
            for k in range(count)
        ]
        ray.get([a.ready.remote() for a in self.actors])

    def call(self, key: str, method: str, args: tuple, timeout_s: float) -> Any:
        import ray

        actor = self.actors[hash(key) % len(self.actors)]
        ref = getattr(actor, method).remote(key, *args)
        try:
            return ray.get(ref, timeout=timeout_s if timeout_s > 0 else None)
        except ray.exceptions.GetTimeoutError:
            raise CallTimeout(f"no answer within {timeout_s:g}s") from None
        except ray.exceptions.RayTaskError as err:
            raise err.as_instanceof_cause() from None

    def shutdown(self) -> None:
        import ray

        try:
            ray.get([a.shutdown.remote() for a in self.actors], timeout=30)
        except Exception:
            log.warning("environment hosts did not shut down cleanly", exc_info=True)
        for a in self.actors:
            ray.kill(a)


def start_hosts(params: AgentParams, pool: PoolReservation | None) -> LocalHosts | RayHosts:
    """Hosts on the environment pool when the run has one reserved on Ray (and ``env_hosting``
    is ``pool``), else in process."""
    if pool is None or params.env_hosting is EnvHosting.local:
        return LocalHosts(params)
    return RayHosts(params, pool)
