"""One call of a user reward function on one row, and the verdict on what it returned.

A call never raises: it gives either a finite score (for a dict, the rest of the dict is kept
as ``reward_info`` JSON) or an error text saying what went wrong (it raised, or returned NaN,
inf, None, a string, a dict without ``score``), so the score node can apply its `on_error`
policy to that row.
"""

from __future__ import annotations

import json
import math
import numbers
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

RewardFn = Callable[..., Any]
RewardArgs = tuple[str, str, str, str | None]  # data_source, response, ground_truth, extra_info

EXPECTED = "expected a finite number or a dict with a numeric 'score'"


class RewardOutcome(NamedTuple):
    """What one call gave: a score (and reward_info JSON), or an error text."""

    score: float = 0.0
    info: str | None = None
    error: str = ""  # empty when the call gave a usable score


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: object, what: str) -> float | str:
    """`value` as a finite float, or the error text saying why it is not one."""
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        return f"{what} {number} ({EXPECTED})"
    kind = "None" if value is None else f"a {type(value).__name__} {_short(value)}"
    return f"{what} {kind} ({EXPECTED})"


def judge(value: object) -> RewardOutcome:
    """The outcome of a reward function that returned `value`."""
    if isinstance(value, dict):
        if "score" not in value:
            keys = ", ".join(str(k) for k in value) or "none"
            return RewardOutcome(error=f"returned a dict without 'score' (keys: {keys})")
        score = _number(value["score"], "returned a dict whose 'score' is")
        if isinstance(score, str):
            return RewardOutcome(error=score)
        return RewardOutcome(score, json.dumps(value, default=str))
    score = _number(value, "returned")
    return RewardOutcome(error=score) if isinstance(score, str) else RewardOutcome(score)


def _raised(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})"
    return f"raised {type(err).__name__}: {err}{where if len(frames) > 1 else ''}"


def call_reward(fn: RewardFn, args: RewardArgs) -> RewardOutcome:
    """Call `fn` veRL-style on one row and judge the result; exceptions become errors."""
    data_source, response, ground_truth, extra_json = args
    try:
        extra = json.loads(extra_json) if extra_json else {}
    except json.JSONDecodeError as err:
        return RewardOutcome(error=f"extra_info is not JSON ({err}): {_short(extra_json)}")
    try:
        return judge(fn(data_source, response, ground_truth, extra))
    except (Exception, SystemExit) as err:
        return RewardOutcome(error=_raised(err))


def call_rewards(fn: RewardFn, rows: Iterable[RewardArgs]) -> Iterator[RewardOutcome]:
    """Outcomes of `fn` on each row, in this process (no timeout)."""
    for row in rows:
        yield call_reward(fn, row)
