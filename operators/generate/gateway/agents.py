"""The user's agent: found, called per episode on an event loop, and judged.

An agent is ``async def rollout(client: openai.AsyncOpenAI, task: dict) -> float | dict``: the
reward, or a dict with a numeric ``reward`` whose other keys are kept as ``reward_info`` JSON.
A call never raises here: it gives an ``AgentOutcome`` with the reward, or with an error whose
``kind`` says what went wrong (``raised``, ``timeout``, ``garbage``). Agents run on one event
loop thread per generate step; an agent that blocks that thread (``time.sleep`` in an
``async def``) stalls every episode of the worker, as in any asyncio program, and its timeout
fires only when it yields.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import numbers
import threading
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, NamedTuple

from rldag import SpecError, import_target

AgentFn = Callable[[Any, dict[str, Any]], Awaitable[Any]]
EXPECTED = "expected a finite number or a dict with a numeric 'reward'"


class AgentOutcome(NamedTuple):
    """What one agent call gave: a reward (and reward_info JSON), or an error."""

    reward: float = 0.0
    info: str = ""
    error: str = ""  # "" when the agent gave a usable reward
    kind: str = ""  # raised | timeout | garbage ("" when fine)


def agent_function(path: str, key: str = "agent") -> AgentFn:
    """The ``module:function`` at ``path``: an ``async def`` of two parameters."""
    if ":" not in path:
        raise SpecError(f"'{path}' is not module:function", path=key)
    fn = import_target(path, key)
    if not inspect.iscoroutinefunction(fn):
        raise SpecError(
            f"'{path}' must be an async function: async def rollout(client, task)", path=key
        )
    try:
        inspect.signature(fn).bind(None, {})
    except TypeError:
        raise SpecError(
            f"'{path}' must take two arguments: (client: openai.AsyncOpenAI, task: dict)",
            path=key,
        ) from None
    return fn


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def judge(value: object) -> AgentOutcome:
    """The outcome of an agent that returned ``value``."""
    info = ""
    reward = value
    if isinstance(value, dict):
        if "reward" not in value:
            keys = ", ".join(str(k) for k in value) or "none"
            return AgentOutcome(
                error=f"returned a dict without 'reward' (keys: {keys})", kind="garbage"
            )
        reward = value["reward"]
        rest = {k: v for k, v in value.items() if k != "reward"}
        try:
            info = json.dumps(rest) if rest else ""
        except (TypeError, ValueError) as err:
            return AgentOutcome(
                error=f"returned extra keys that are not JSON ({err})", kind="garbage"
            )
    if isinstance(reward, numbers.Real) and not isinstance(reward, bool):
        if math.isfinite(float(reward)):
            return AgentOutcome(float(reward), info)
    return AgentOutcome(error=f"returned {_short(reward)} ({EXPECTED})", kind="garbage")


def _raised(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})"
    return f"raised {type(err).__name__}: {err}{where if len(frames) > 1 else ''}"


async def call_agent(
    fn: AgentFn, client: Any, task: dict[str, Any], timeout_s: float
) -> AgentOutcome:
    """``fn(client, task)`` bounded by ``timeout_s`` (0: none), judged."""
    try:
        value = await asyncio.wait_for(fn(client, task), timeout_s if timeout_s > 0 else None)
    except TimeoutError:
        return AgentOutcome(error=f"did not return within timeout_s={timeout_s:g}", kind="timeout")
    except (Exception, SystemExit) as err:
        return AgentOutcome(error=_raised(err), kind="raised")
    return judge(value)


class LoopThread:
    """An asyncio event loop on a daemon thread; coroutines are submitted from other threads."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float | None = None) -> Any:
        return self.submit(coro).result(timeout_s)

    def close(self) -> None:
        """Cancel what still runs, then stop the loop and its thread."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(cancel_all(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()
