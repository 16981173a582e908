"""A guessing game written as any OpenEnv environment is: an ``Environment`` with its
``Action`` and ``Observation`` models, served by ``create_app`` (examples/agent_openenv.yaml
trains on it through ``operators.generate.agent.openenv_env:OpenEnvEnvironment``).

The secret comes from ``reset(secret=...)``; each step's message is a guess (its last digit);
a wrong one is answered ``higher`` or ``lower``, a message without a digit ``invalid``. The
right guess ends the episode with reward 1; ``MAX_GUESSES`` guesses end it.
"""

from __future__ import annotations

import re
from typing import Any

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MAX_GUESSES = 6


class GuessAction(Action):
    """What the model said."""

    message: str = Field(..., description="the guess, a digit")


class GuessObservation(Observation):
    """The game's reply and the guesses so far (the server adds ``reward`` and ``done``)."""

    reply: str = Field(default="", description="higher, lower, invalid; empty at the start")
    guesses: int = Field(default=0)


class GuessEnvironment(Environment):
    """One game per session: the server makes one per client connection."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.secret = 0

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GuessObservation:
        self.secret = int(kwargs["secret"])
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(reply="", done=False, reward=0.0)  # the prompt says it all

    def step(
        self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GuessObservation:
        self._state.step_count += 1
        digits = re.findall(r"\d", action.message)
        guesses = self._state.step_count
        if not digits:
            reply = "invalid"
        elif int(digits[-1]) == self.secret:
            return GuessObservation(reply="right", guesses=guesses, done=True, reward=1.0)
        else:
            reply = "higher" if self.secret > int(digits[-1]) else "lower"
        done = guesses >= MAX_GUESSES
        return GuessObservation(reply=reply, guesses=guesses, done=done, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=512)


def digit_or_refuse(text: str) -> dict[str, Any]:
    """An action parser (``env_params.parser``): the turn's last digit, or ValueError."""
    digits = re.findall(r"\d", text)
    if not digits:
        raise ValueError("expected a digit")
    return {"message": digits[-1]}
