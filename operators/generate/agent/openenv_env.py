"""OpenEnv environments as text environments: `OpenEnvEnvironment` plays one episode through
OpenEnv's own client (``reset``/``step`` over a WebSocket session of an OpenEnv server).

The server is one already running (``base_url``) or, with ``app: module:attr``, the FastAPI
app that ``openenv.core.env_server.create_app(Env, Action, Observation)`` built, started once
per process on a loopback port (each environment host starts its own, on first use). Every
episode opens its own session, so the app's ``max_concurrent_envs`` bounds the episodes in
flight per host. The row's columns reach the environment's ``reset`` as keyword arguments
(``reset_columns``: ``{seed: prompt_id}`` by default, so the n episodes of a prompt start
alike). Each assistant turn becomes an action: its text outside ``<think>`` in the field
``action_field``, or what a parser (``module:function(text) -> dict``) makes of it; an action
the parser or the server's validation refuses is not stepped: the model is told why, the step
earns ``invalid_reward`` and ``info.invalid_actions`` counts it. Each observation is a user
message (its ``observation_field``, or its fields as JSON); the server's reward is the turn's
reward and its ``done`` ends the episode. Needs the ``agents`` extra.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from operators.generate.agent.environment import AssistantTurn, Message, StepResult
from operators.generate.agent.gym_env import jsonable
from operators.generate.agent.text_actions import visible_text
from rldag import SpecError
from rldag.graph.registry import GraphError, callable_target, import_target

ActionParser = Callable[[str], dict[str, Any]]  # assistant text -> the action's fields
_INVALID = "VALIDATION_ERROR"  # the server's error code for an action its model refuses
_SERVERS: dict[str, str] = {}  # app path -> base URL of this process's server for it
_SERVERS_LOCK = threading.Lock()


def _missing() -> SpecError:
    message = "openenv-core is not installed: pip install 'rldag[agents]'"
    return SpecError(message, path="env_params.app")


def serve_locally(app_path: str, start_timeout_s: float = 30.0) -> str:
    """The base URL of this process's server for the app at `app_path` (``module:attr``),
    started on a free loopback port in a daemon thread the first time it is asked for."""
    with _SERVERS_LOCK:
        if app_path not in _SERVERS:
            _SERVERS[app_path] = _start(app_path, start_timeout_s)
        return _SERVERS[app_path]


def quiet_disconnects(app: Any) -> Any:
    """`app` (ASGI) ending a WebSocket quietly when its client has gone: OpenEnv 0.3.0 closes
    a session's socket after the client closed it, which uvicorn's sans-I/O WebSockets answer
    with WebSocketDisconnect out of the app (an error log per episode, nothing else)."""
    from starlette.websockets import WebSocketDisconnect

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise

    return asgi


def _start(app_path: str, start_timeout_s: float) -> str:
    try:
        import uvicorn
    except ImportError:
        raise _missing() from None
    try:
        app = import_target(app_path, "env_params.app")
    except GraphError as err:
        raise SpecError(str(err), path="env_params.app") from None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(quiet_disconnects(app), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"openenv {app_path}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the OpenEnv server of {app_path} did not start")
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


class OpenEnvEnvironment:
    """One episode of an OpenEnv environment, spoken in text; see the module docstring."""

    def __init__(
        self,
        app: str = "",
        base_url: str = "",
        action_field: str = "message",
        parser: str = "",
        observation_field: str = "",
        reset_columns: Mapping[str, str] | None = None,
        invalid_reward: float = 0.0,
        timeout_s: float = 60.0,
    ) -> None:
        try:
            from openenv.core import GenericEnvClient
        except ImportError:
            raise _missing() from None
        if bool(app) == bool(base_url):
            message = "give app (module:attr of an OpenEnv app to serve here) or base_url"
            raise SpecError(message, path="env_params.app")
        url = serve_locally(app) if app else base_url
        self.parse = self._parser(parser, action_field)
        self.observation_field = observation_field
        self.reset_columns = dict({"seed": "prompt_id"} if reset_columns is None else reset_columns)
        self.invalid_reward = invalid_reward
        self.invalid_actions = 0
        self.client = GenericEnvClient(base_url=url, message_timeout_s=timeout_s).sync()

    @staticmethod
    def _parser(parser: str, action_field: str) -> ActionParser:
        if not parser:
            return lambda text: {action_field: visible_text(text).strip()}
        try:
            return callable_target(parser, import_target(parser, "env_params.parser"))
        except GraphError as err:
            raise SpecError(str(err), path="env_params.parser") from None

    def _message(self, observation: Mapping[str, Any]) -> Message:
        if self.observation_field:
            text = str(observation.get(self.observation_field, ""))
        else:
            text = json.dumps(jsonable(dict(observation)), sort_keys=True)
        return {"role": "user", "content": text}

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        """Open a session (the first time) and reset it with the row's `reset_columns`; the
        first observation follows the row's prompt unless its text is empty."""
        kwargs = {k: jsonable(row[c]) for k, c in self.reset_columns.items() if c in row}
        self.invalid_actions = 0
        first = self._message(self.client.reset(**kwargs).observation)
        return [first] if first["content"] else []

    def _invalid(self, why: str) -> StepResult:
        self.invalid_actions += 1
        message = f"invalid action: {why}"
        return StepResult(
            observation=[{"role": "user", "content": message}],
            reward=self.invalid_reward,
            info={"invalid_action": message, "invalid_actions": self.invalid_actions},
        )

    def step(self, turn: AssistantTurn) -> StepResult:
        """The turn as an action, stepped on the server."""
        try:
            action = self.parse(turn.text)
        except ValueError as err:
            return self._invalid(str(err))
        try:
            result = self.client.step(action)
        except RuntimeError as err:  # the server's error reply; other failures are the host's
            if _INVALID not in str(err):
                raise
            return self._invalid(f"the environment refused {json.dumps(action)}")
        observation = dict(result.observation)
        return StepResult(
            observation=[] if result.done else [self._message(observation)],
            reward=float(result.reward or 0.0),
            done=bool(result.done),
            info={"observation": jsonable(observation), "invalid_actions": self.invalid_actions},
        )

    def close(self) -> None:
        self.client.close()
