"""The prompts of the tiny agent tasks, the lookup episodes' fact tables, and the synthetic
episodes the warm-up trains on (messages as ``agent_loop`` would record them)."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from operators.generate.agent.environment import Message

GUESS_PROMPT = "guess="
LOOKUP_PROMPT = "lookup "
HIGHER, LOWER = "higher", "lower"  # the guessing game's replies (GuessingGame higher/lower)


def episode_facts(index: int, keys: int) -> list[int]:
    """The table of row ``index``'s episode: a digit per key ``0..keys-1``. The row's own key
    (``index % keys``) holds ``(index // keys) % 10``, so the rows sharing a prompt hold every
    answer equally often (no policy without the tool beats 0.1 on them); the other keys hold
    hashed digits."""
    own, answer = index % keys, (index // keys) % 10
    hashed = [hashlib.sha256(f"fact-{index}-{k}".encode()).digest()[0] % 10 for k in range(keys)]
    return [answer if k == own else d for k, d in enumerate(hashed)]


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


def lookup_problems(keys: int, rows_per_key: int) -> list[AgentProblem]:
    """``keys * rows_per_key`` rows, row ``i`` asking for key ``i % keys`` of its episode's
    table (the answer is the fact under it)."""
    rows = range(keys * rows_per_key)
    facts = [str(episode_facts(i, keys)[i % keys]) for i in rows]
    return [AgentProblem(f"{LOOKUP_PROMPT}{i % keys}", facts[i], i, i % keys) for i in rows]


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


def lookup_episode(
    problem: AgentProblem, keys: int, key_smoothing: float, answer_smoothing: float
) -> list[Message]:
    """The call, the tool's answer, and the answer repeated: the messages after the prompt."""
    value = str(episode_facts(problem.index, keys)[problem.key])
    return [
        {"role": "assistant", "content": tool_call_text(problem.key), "smoothing": key_smoothing},
        {"role": "tool", "name": "lookup", "content": value},
        {"role": "assistant", "content": value, "smoothing": answer_smoothing},
    ]


def corpus_lines(problems: list[AgentProblem], calls: bool) -> list[str]:
    """The tokenizer's training text: prompts, the game's replies, and (``calls``) tool calls."""
    lines = [p.prompt for p in problems] + [HIGHER, LOWER, "invalid", "0123456789"]
    return lines + [tool_call_text(k) for k in range(10)] if calls else lines
