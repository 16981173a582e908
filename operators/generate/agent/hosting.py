"""Where an agent's environments live: one instance per episode, in an ``EnvironmentHost``.

In process (no Ray) the host is an object of the rollout worker; on Ray the hosts are actors
on the environment pool's placement group (``ctx.companion``): a few actors (one per pool
worker unless ``env_workers`` says otherwise), each hosting many episodes' environments, with
``max_concurrency`` threads so that tool calls of different episodes run at the same time.
Every call is bounded by a timeout (the caller's ``step_timeout_s`` or what is left of the
episode's); a timeout or an exception is the caller's to turn into a finish reason, never a
failed run. Both kinds of hosts answer the same typed calls (`Hosts`); the actors are called
through a typed handle (`EnvironmentHandle`, checked against `EnvironmentHost` by the tests).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

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
from rldag.compute.remote import Remote

if TYPE_CHECKING:
    from ray import ObjectRef

log = logging.getLogger("rldag.ops")
R = TypeVar("R")
Opened = tuple[list[Message], list[dict]]  # an episode's first messages and tool schemas


class EnvironmentHost:
    """Many episodes' environments in one process, by episode key."""

    def __init__(self, params: AgentParams) -> None:
        self.params = params
        self._envs: dict[str, Environment] = {}

    def open(self, key: str, row: Mapping[str, Any]) -> Opened:
        """Build and reset the episode's environment: its first messages and tool schemas."""
        env = build_environment(self.params)
        self._envs[key] = env
        messages = env.reset(row)
        tools = env.tool_schemas() if isinstance(env, OffersTools) else []
        return messages, tools

    def step(self, key: str, turn: AssistantTurn) -> StepResult:
        """The environment's answer to the episode's turn."""
        return self._envs[key].step(turn)

    def close(self, key: str) -> None:
        """Close and forget the episode's environment (nothing when it has none)."""
        env = self._envs.pop(key, None)
        if env is not None:
            env.close()

    def shutdown(self) -> None:
        """Close every environment still open, and the sandboxes of Python tools."""
        for key in list(self._envs):
            try:
                self.close(key)
            except Exception:
                log.warning("closing environment %s failed", key, exc_info=True)
        close_sandboxes()

    def ready(self) -> bool:
        """True once the host is built (an actor answers when it is up)."""
        return True


class Hosts(Protocol):
    """The episodes' environments, wherever they are; each call bounded by `timeout_s`."""

    def open(self, key: str, row: Mapping[str, Any], timeout_s: float) -> Opened: ...
    def step(self, key: str, turn: AssistantTurn, timeout_s: float) -> StepResult: ...
    def close(self, key: str, timeout_s: float) -> None: ...
    def shutdown(self) -> None: ...


class EnvironmentHandle(Protocol):
    """An EnvironmentHost actor, as its callers see it (each member: one of its methods)."""

    open: Remote[[str, Mapping[str, Any]], Opened]
    step: Remote[[str, AssistantTurn], StepResult]
    close: Remote[[str], None]
    shutdown: Remote[[], None]
    ready: Remote[[], bool]


class LocalHosts:
    """One in-process host."""

    def __init__(self, params: AgentParams) -> None:
        self.host = EnvironmentHost(params)

    def open(self, key: str, row: Mapping[str, Any], timeout_s: float) -> Opened:
        return call_with_deadline(lambda: self.host.open(key, row), timeout_s)

    def step(self, key: str, turn: AssistantTurn, timeout_s: float) -> StepResult:
        return call_with_deadline(lambda: self.host.step(key, turn), timeout_s)

    def close(self, key: str, timeout_s: float) -> None:
        call_with_deadline(lambda: self.host.close(key), timeout_s)

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
        self.actors: list[EnvironmentHandle] = [
            cast(
                EnvironmentHandle,
                actor.options(
                    num_cpus=pool.cpus / per_bundle,
                    max_concurrency=2 * params.max_concurrency + 2,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pool.placement_group, placement_group_bundle_index=k % pool.bundles
                    ),
                ).remote(params),
            )
            for k in range(count)
        ]
        ray.get([a.ready.remote() for a in self.actors])

    def _actor(self, key: str) -> EnvironmentHandle:
        return self.actors[hash(key) % len(self.actors)]

    def open(self, key: str, row: Mapping[str, Any], timeout_s: float) -> Opened:
        return _answer(self._actor(key).open.remote(key, row), timeout_s)

    def step(self, key: str, turn: AssistantTurn, timeout_s: float) -> StepResult:
        return _answer(self._actor(key).step.remote(key, turn), timeout_s)

    def close(self, key: str, timeout_s: float) -> None:
        _answer(self._actor(key).close.remote(key), timeout_s)

    def shutdown(self) -> None:
        import ray

        try:
            ray.get([a.shutdown.remote() for a in self.actors], timeout=30)
        except Exception:
            log.warning("environment hosts did not shut down cleanly", exc_info=True)
        for a in self.actors:
            ray.kill(a)


def _answer(ref: ObjectRef[R], timeout_s: float) -> R:
    """An actor call's result within `timeout_s` (0: no bound); its exception as raised."""
    import ray

    try:
        return ray.get(ref, timeout=timeout_s if timeout_s > 0 else None)
    except ray.exceptions.GetTimeoutError:
        raise CallTimeout(f"no answer within {timeout_s:g}s") from None
    except ray.exceptions.RayTaskError as err:
        raise err.as_instanceof_cause() from None


def start_hosts(params: AgentParams, pool: PoolReservation | None) -> Hosts:
    """Hosts on the environment pool when the run has one reserved on Ray (and ``env_hosting``
    is ``pool``), else in process."""
    if pool is None or params.env_hosting is EnvHosting.local:
        return LocalHosts(params)
    return RayHosts(params, pool)
