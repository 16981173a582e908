"""A guessing game written with OpenEnv's own API (an ``Environment`` with its ``Action`` and
``Observation`` models, served by ``create_app``), for the OpenEnv adapter's tests.

The secret comes from ``reset(secret=...)``; each step's message is a guess (its last digit);
a wrong one is answered ``higher`` or ``lower``, a message without a digit ``invalid``. The
right guess ends the episode with reward 1; ``MAX_GUESSES`` wrong ones end it with 0.
"""

from __future__ import annotations

import re
from typing import Any

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MAX_GUESSES = 6
SESSIONS = {"opened": 0}  # sessions this process's server opened (one per episode)


class GuessAction(Action):
    message: str = Field(..., description="the guess, a digit")


class GuessObservation(Observation):
    reply: str = Field(default="", description="higher, lower, invalid; empty at the start")
    guesses: int = Field(default=0)


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        SESSIONS["opened"] += 1
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
    """A parser for the adapter: the turn's last digit as the action, or ValueError."""
    digits = re.findall(r"\d", text)
    if not digits:
        raise ValueError("expected a digit")
    return {"message": digits[-1]}
