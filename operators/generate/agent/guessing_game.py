"""A small stateful text environment over several turns: guess the row's secret number.

The secret comes from the row (``secret_column``, default ``ground_truth``); each assistant
turn's last integer (outside ``<think>``) is a guess; a wrong guess is answered ``higher`` or
``lower`` (the secret is above or below it; both texts are settable, so a policy with a tiny
vocabulary can read them), a turn without a number in ``low..high`` is answered ``invalid``
and still costs its guess. Guessing right ends the episode with reward
``1 - turn_penalty * (guesses - 1)`` (fewer turns are better; the default penalty is
``1 / max_guesses``); ``max_guesses`` wrong ones end it with 0. With ``strict``, a guess the
replies so far already rule out (a repeat, one on the wrong side of a reply, an invalid one)
loses at once with 0: only play that uses the feedback can win. Used as
``environment: operators.generate.agent.guessing_game:GuessingGame``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.generate.agent.environment import AssistantTurn, Message, StepResult
from operators.generate.agent.text_actions import integers, visible_text
from rldag import SpecError, check_positive


def success_reward(guesses: int, turn_penalty: float) -> float:
    """The reward of guessing right with the `guesses`-th guess: 1 for the first, then
    `turn_penalty` less per extra guess (never below 0)."""
    return max(0.0, 1.0 - turn_penalty * (guesses - 1))


class GuessingGame:
    """Higher/lower number guessing; see the module docstring."""

    def __init__(
        self,
        low: int = 1,
        high: int = 9,
        max_guesses: int = 4,
        secret_column: str = "ground_truth",
        higher: str = "higher",
        lower: str = "lower",
        invalid: str = "invalid",
        intro: str = "",
        turn_penalty: float | None = None,
        strict: bool = False,
    ) -> None:
        check_positive("env_params.max_guesses", max_guesses)
        if low > high:
            raise SpecError(f"low {low} is above high {high}", path="env_params.low")
        self.low, self.high, self.max_guesses = low, high, max_guesses
        self.secret_column = secret_column
        self.replies = {"higher": higher, "lower": lower, "invalid": invalid}
        self.intro = intro
        self.turn_penalty = 1.0 / max_guesses if turn_penalty is None else turn_penalty
        check_positive("env_params.turn_penalty", self.turn_penalty, allow_zero=True)
        self.strict = strict
        self.secret = low
        self.guesses = 0
        self.possible = (low, high)  # the secrets the replies so far leave

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        """Read the secret from the row; the intro (if any) is the first observation."""
        value = row.get(self.secret_column)
        try:
            secret = int(str(value).strip())
        except ValueError:
            secret = None
        if secret is None or not self.low <= secret <= self.high:
            raise ValueError(
                f"column {self.secret_column!r} holds {value!r}, not a secret number in "
                f"{self.low}..{self.high}"
            )
        self.secret, self.guesses = secret, 0
        self.possible = (self.low, self.high)
        return [{"role": "user", "content": self.intro}] if self.intro else []

    def _guess(self, text: str) -> int | None:
        found = integers(visible_text(text))
        value = found[-1][1] if found else None
        return value if value is not None and self.low <= value <= self.high else None

    def step(self, turn: AssistantTurn) -> StepResult:
        """Judge one guess: the reward and the end when right, else higher/lower/invalid."""
        self.guesses += 1
        guess = self._guess(turn.text)
        lowest, highest = self.possible
        consistent = guess is not None and lowest <= guess <= highest
        info = {
            "guess": guess,
            "guesses": self.guesses,
            "secret": self.secret,
            "consistent": consistent,
        }
        if guess == self.secret:
            reward = success_reward(self.guesses, self.turn_penalty)
            return StepResult(reward=reward, done=True, info={**info, "solved": True})
        if self.guesses >= self.max_guesses or (self.strict and not consistent):
            return StepResult(done=True, info={**info, "solved": False})
        if guess is None:
            reply = "invalid"
        elif self.secret > guess:
            reply, self.possible = "higher", (max(lowest, guess + 1), highest)
        else:
            reply, self.possible = "lower", (lowest, min(highest, guess - 1))
        return StepResult(observation=[{"role": "user", "content": self.replies[reply]}], info=info)

    def close(self) -> None:
        """Nothing to release."""
