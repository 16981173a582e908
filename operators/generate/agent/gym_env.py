"""Gymnasium simulators as text environments: `GymTextEnvironment` wraps
``gymnasium.make(env_id, **kwargs)`` in the environment contract.

Each observation becomes a user message (a formatter: ``str`` of the observation by default,
``ansi`` for the environment's text rendering, or ``module:function(observation, env) ->
str``); each assistant turn becomes an action (a parser: ``discrete`` by default, the last
integer of the turn, or one of ``action_names``; or ``module:function(text, action_space) ->
action``, raising ValueError saying what it expected). An unparsable action is not sent to the
simulator: the model gets an error observation naming what was expected, the step earns
``invalid_reward`` and the episode's ``invalid_actions`` count grows. The simulator's reward
is the turn's reward; terminated or truncated ends the episode. Needs the ``agents`` extra.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from operators.generate.agent.environment import AssistantTurn, Message, StepResult
from operators.generate.agent.text_actions import integers, visible_text
from rldag import SpecError
from rldag.graph.registry import Registry, callable_target

Formatter = Callable[[Any, Any], str]  # (observation, env) -> message text
Parser = Callable[[str, Any], Any]  # (assistant text, action space) -> action
_HIGHLIGHT = re.compile(r"\x1b\[4[0-7]m(.*?)\x1b\[0m")  # ansi renderings mark the agent so
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def format_str(observation: Any, env: Any) -> str:
    """The observation as ``str()`` gives it (FrozenLake's state index, Blackjack's tuple)."""
    return str(observation)


def format_ansi(observation: Any, env: Any) -> str:
    """The environment's ``ansi`` rendering, colour codes removed (a highlighted cell, the
    agent's, is shown in brackets)."""
    return _ESCAPE.sub("", _HIGHLIGHT.sub(r"[\1]", env.render())).strip("\n")


GYM_FORMATTERS: Registry[Formatter] = Registry("formatter")
GYM_FORMATTERS.add("str", format_str)
GYM_FORMATTERS.add("ansi", format_ansi)


def discrete_parser(names: Sequence[str] = ()) -> Parser:
    """A parser for ``Discrete`` spaces: the last action name (case-insensitive, whole word)
    or the last integer in the turn outside ``<think>`` blocks."""
    words = [n.lower() for n in names]

    def parse(text: str, space: Any) -> int:
        start, n = int(space.start), int(space.n)
        expected = f"an integer in {start}..{start + n - 1}"
        if words:
            expected += " or one of " + ", ".join(words)
        said = visible_text(text).lower()
        found = integers(said)
        for index, word in enumerate(words):
            for m in re.finditer(rf"\b{re.escape(word)}\b", said):
                found.append((m.start(), start + index))
        if not found:
            raise ValueError(f"expected {expected}, found none")
        value = max(found)[1]
        if not start <= value < start + n:
            raise ValueError(f"expected {expected}, got {value}")
        return value

    return parse


def _user_parser(path: str, found: Any) -> Callable[[Sequence[str]], Parser]:
    """A user's parser (``module:function``), which reads no action names."""
    parse = callable_target(path, found)
    return lambda _names: parse


# A parser by name, made from the environment's `action_names`.
GYM_PARSERS: Registry[Callable[[Sequence[str]], Parser]] = Registry("parser", accept=_user_parser)
GYM_PARSERS.add("discrete", discrete_parser)


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def jsonable(value: Any) -> Any:
    """A simulator's value (info dict, action) with numpy scalars and arrays as plain JSON."""
    return json.loads(json.dumps(value, default=_plain))


class GymTextEnvironment:
    """One episode of a Gymnasium environment, spoken in text; see the module docstring.

    ``seed_column`` names the row column whose value seeds ``reset`` (default ``prompt_id``,
    so the n episodes of one prompt start from the same state, as GRPO groups want); a row
    without it resets unseeded."""

    def __init__(
        self,
        env_id: str,
        kwargs: Mapping[str, Any] | None = None,
        formatter: str = "str",
        parser: str = "discrete",
        action_names: Sequence[str] = (),
        seed_column: str = "prompt_id",
        invalid_reward: float = 0.0,
    ) -> None:
        try:
            import gymnasium
        except ImportError:
            message = "gymnasium is not installed: pip install 'rldag[agents]'"
            raise SpecError(message, path="env_params.env_id") from None
        self.format = GYM_FORMATTERS.get(formatter, "env_params.formatter")
        kwargs = dict(kwargs or {})
        if self.format is format_ansi:
            kwargs.setdefault("render_mode", "ansi")
        try:
            self.env = gymnasium.make(env_id, **kwargs)
        except (gymnasium.error.Error, TypeError, ValueError) as err:
            message = f"gymnasium.make({env_id!r}, **{kwargs}) failed: {err}"
            raise SpecError(message, path="env_params.env_id") from None
        make_parser = GYM_PARSERS.get(parser, "env_params.parser")
        if make_parser is discrete_parser:
            if not isinstance(self.env.action_space, gymnasium.spaces.Discrete):
                raise SpecError(
                    f"{env_id}'s action space {self.env.action_space} is not Discrete: give "
                    "env_params.parser: module:function(text, action_space) -> action",
                    path="env_params.parser",
                )
            if action_names and len(action_names) != self.env.action_space.n:
                raise SpecError(
                    f"{len(action_names)} action_names for {self.env.action_space.n} actions",
                    path="env_params.action_names",
                )
        self.parse: Parser = make_parser(action_names)
        self.seed_column = seed_column
        self.invalid_reward = invalid_reward
        self.invalid_actions = 0

    def _message(self, observation: Any) -> Message:
        return {"role": "user", "content": self.format(observation, self.env)}

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        """Reset the simulator (seeded from the row) and show its first observation."""
        seed = row.get(self.seed_column)
        observation, _ = self.env.reset(seed=None if seed is None else int(seed))
        self.invalid_actions = 0
        return [self._message(observation)]

    def step(self, turn: AssistantTurn) -> StepResult:
        """Parse the turn into an action and step the simulator with it."""
        try:
            action = self.parse(turn.text, self.env.action_space)
        except ValueError as err:
            self.invalid_actions += 1
            message = f"invalid action: {err}"
            return StepResult(
                observation=[{"role": "user", "content": message}],
                reward=self.invalid_reward,
                info={"invalid_action": message, "invalid_actions": self.invalid_actions},
            )
        observation, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        return StepResult(
            observation=[] if done else [self._message(observation)],
            reward=float(reward),
            done=done,
            info={
                **jsonable(dict(info)),
                "action": jsonable(action),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "invalid_actions": self.invalid_actions,
            },
        )

    def close(self) -> None:
        self.env.close()
