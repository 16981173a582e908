"""The prompts of the tiny agent tasks, the ``lookup`` tool, and the synthetic episodes the
warm-up trains on (messages as ``agent_loop`` would record them)."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from operators.agent.environment import Message

GUESS_PROMPT = "guess="
HIGHER, LOWER = "higher", "lower"  # the guessing game's replies (GuessingGame higher/lower)


def fact(key: int) -> int:
    """The digit stored under ``key``: a hash, so nothing but the tool can know it."""
    return hashlib.sha256(f"fact-{key}".encode()).digest()[0] % 10


def lookup(key: int) -> int:
    """Look up the fact stored under a key.

    Args:
        key: the key, a three-digit number
    """
    return fact(key)


def tool_call_text(key: int) -> str:
    """The hermes call of ``lookup`` for ``key``, as the tiny policy writes it."""
    call = {"name": "lookup", "arguments": {"key": key}}
    return f"<tool_call>{json.dumps(call, separators=(',', ':'))}</tool_call>"


@dataclass(frozen=True)
class AgentProblem:
    """One prompt row: its text, what the reward compares with, and a stable index."""

    prompt: str
    ground_truth: str
    index: int
    key: int = 0  # lookup: the key the prompt asks about


def guess_problems(low: int, high: int, copies: int) -> list[AgentProblem]:
    """``copies`` rows per secret in ``low..high`` (the secret is the ground truth)."""
    secrets = [s for _ in range(copies) for s in range(low, high + 1)]
    return [AgentProblem(GUESS_PROMPT, str(s), i) for i, s in enumerate(secrets)]


def lookup_problems(first: int, last: int) -> list[AgentProblem]:
    """A row per key ``first..last``; the answer is the fact under it."""
    keys = range(first, last + 1)
    return [AgentProblem(f"lookup {k}", str(fact(k)), i, k) for i, k in enumerate(keys)]


def guess_episode(
    rng: random.Random, secret: int, low: int, high: int, turns: int, smoothing: float
) -> list[Message]:
    """A game played with uniform guesses: the messages after the prompt (an assistant
    message's ``smoothing`` is its digits' target smoothing in the warm-up)."""
    messages: list[Message] = []
    for _ in range(turns):
        guess = rng.randint(low, high)
        messages.append({"role": "assistant", "content": str(guess), "smoothing": smoothing})
        if guess == secret:
            break
        messages.append({"role": "user", "content": HIGHER if secret > guess else LOWER})
    return messages


def lookup_episode(key: int, key_smoothing: float, answer_smoothing: float) -> list[Message]:
    """The call, the tool's answer, and the answer repeated: the messages after the prompt."""
    value = str(fact(key))
    return [
        {"role": "assistant", "content": tool_call_text(key), "smoothing": key_smoothing},
        {"role": "tool", "name": "lookup", "content": value},
        {"role": "assistant", "content": value, "smoothing": answer_smoothing},
    ]


def corpus_lines(problems: list[AgentProblem], calls: bool) -> list[str]:
    """The tokenizer's training text: prompts, the game's replies, and (``calls``) tool calls."""
    lines = [p.prompt for p in problems] + [HIGHER, LOWER, "invalid", "0123456789"]
    return lines + [tool_call_text(100 + k) for k in range(50)] if calls else lines
