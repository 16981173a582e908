"""One agent episode: model turns and environment steps, token in / token out.

The context the model continues is always the episode's own ids: the prompt, then every
sampled turn exactly as sampled (``mask`` 1, with its log-probs) and every environment turn as
the chat template rendered it (``mask`` 0, log-prob 0). Budgets end the episode with a
``FinishReason``; an environment that raises, hangs or answers garbage ends it (or, for a
failed tool call, continues with the error as observation) and never raises from here; so
does a turn the chat template cannot extend the conversation with (sampled text that a BPE
merges with its neighbour), as ``tool_error``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from operators.generate.agent.deadline import CallTimeout
from operators.generate.agent.environment import AssistantTurn, CallRecord, Message, StepResult
from operators.generate.agent.params import AgentParams, FinishReason, OnToolError
from operators.generate.agent.parsers import ToolParser
from operators.generate.agent.render import ConversationTokens, TemplateError

if TYPE_CHECKING:
    from operators.generate.agent.hosting import Hosts

# (context ids, max new tokens, turn, seconds left) -> (completion, policy version)
SampleTurn = Callable[[list[int], int, int, float | None], tuple[Any, int]]


@dataclass
class TurnRecord:
    """One model turn and the environment's answer, as spans of the response ids."""

    start: int  # first response position of the model's tokens
    model_end: int  # end of the model's tokens (exclusive); environment tokens follow
    end: int  # end of this turn's environment tokens
    generate_seconds: float
    env_seconds: float = 0.0
    reward: float = 0.0
    policy_version: int = 0
    finish: str = ""  # the engine's finish reason for this turn (stop, length, abort)
    errors: list[str] = field(default_factory=list)
    info: str = ""  # the environment's StepResult.info as JSON


@dataclass
class Episode:
    """A finished episode: what the rollout table stores of it."""

    prompt_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # response ids (model + environment)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    calls: list[tuple[int, CallRecord]] = field(default_factory=list)  # (turn, record)
    finish_reason: str = FinishReason.stop
    text: str = ""  # the last assistant turn's text (the `response` column)
    errors: list[str] = field(default_factory=list)

    @property
    def versions(self) -> tuple[tuple[int, str], ...]:
        """(first token index, policy version) of each version that generated the turns."""
        out: list[tuple[int, str]] = []
        for turn in self.turns:
            if not out or out[-1][1] != str(turn.policy_version):
                out.append((turn.start, str(turn.policy_version)))
        return tuple(out)

    def extend(self, ids: list[int], logprobs: list[float] | None = None) -> None:
        """Append model ids (with their log-probs) or environment ids (``logprobs`` None)."""
        self.token_ids.extend(ids)
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.mask.extend([1 if logprobs is not None else 0] * len(ids))


def stored_message(message: Mapping[str, Any], calls: tuple = ()) -> dict[str, str]:
    """A message as the ``messages`` column holds it (tool calls as JSON)."""
    return {
        "role": str(message.get("role", "")),
        "content": str(message.get("content", "")),
        "name": str(message.get("name", "") or ""),
        "tool_calls": json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])
        if calls
        else "",
    }


def truncate_middle(tokenizer: Any, text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` tokens, keeping its head and tail."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = len(ids) - limit
    return (
        tokenizer.decode(ids[:head])
        + f"\n...[{cut} tokens truncated]...\n"
        + tokenizer.decode(ids[len(ids) - tail :] if tail else [])
    )


def _unusable(messages: Any) -> str:
    """Why ``messages`` is not a list of chat messages ("" when it is)."""
    if not isinstance(messages, list):
        return f"the environment returned {type(messages).__name__}, not a list of messages"
    for m in messages:
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            return f"the environment returned a message without a role: {m!r:.80}"
        if not isinstance(m.get("content"), str):
            return f"the environment returned a message whose content is not text: {m!r:.80}"
    return ""


class EpisodeRunner:
    """Runs episodes against environment hosts with one parser, tokenizer and budgets."""

    def __init__(
        self,
        params: AgentParams,
        tokenizer: Any,
        parse: ToolParser,
        hosts: Hosts,
        context: int | None,
    ) -> None:
        self.p, self.tokenizer, self.parse = params, tokenizer, parse
        self.hosts, self.context = hosts, context

    def _timeout(self, deadline: float | None) -> float:
        """A call's bound: the step timeout, or what is left of the episode when less."""
        timeout = self.p.step_timeout_s
        if deadline is not None:
            left = max(deadline - time.monotonic(), 1e-3)
            timeout = min(timeout, left) if timeout > 0 else left
        return timeout

    def _observe(self, messages: list[Message]) -> list[Message]:
        limit = self.p.max_tool_response_tokens
        return [
            {**m, "content": truncate_middle(self.tokenizer, m["content"], limit)} for m in messages
        ]

    def run(
        self, key: str, row: Mapping[str, Any], prompt: list[Message], sample: SampleTurn
    ) -> Episode:
        """One whole episode (its turns sampled by ``sample``); the environment is closed at
        the end whatever happened."""
        episode = Episode()
        begin = time.monotonic()
        deadline = begin + self.p.episode_timeout_s if self.p.episode_timeout_s > 0 else None
        try:
            self._play(episode, key, row, prompt, sample, deadline)
        finally:
            try:
                self.hosts.close(key, self.p.step_timeout_s)
            except Exception as err:  # a broken close is recorded, not raised
                episode.errors.append(f"close: {type(err).__name__}: {err}")
        return episode

    def _parse(self, text: str) -> AssistantTurn:
        """The turn's tool calls; a parser that raises gives a parse error, not a failed run."""
        try:
            return self.parse(text)
        except Exception as err:
            return AssistantTurn(text, (), (f"the tool-call parser raised {err!r}",))

    def _fail(self, episode: Episode, err: Exception, what: str) -> None:
        timeout = isinstance(err, CallTimeout)
        episode.finish_reason = FinishReason.timeout if timeout else FinishReason.tool_error
        episode.errors.append(
            f"{what}: {err}" if timeout else f"{what}: {type(err).__name__}: {err}"
        )

    def _play(
        self,
        ep: Episode,
        key: str,
        row: Mapping[str, Any],
        prompt: list[Message],
        sample: SampleTurn,
        deadline: float | None,
    ) -> None:
        p = self.p
        first: list[Message] = []
        tools: list[dict] = []
        try:
            first, tools = self.hosts.open(key, dict(row), self._timeout(deadline))
            bad = _unusable(first)
            if bad:
                raise TypeError(bad)
        except Exception as err:
            first, tools = [], []
            self._fail(ep, err, "reset")
        convo = ConversationTokens(self.tokenizer, [*prompt, *first], tools)
        ep.prompt_ids = convo.prompt_ids
        ep.messages = [stored_message(m) for m in convo.messages]
        if ep.errors:
            return
        for turn_index in range(p.max_turns):
            used = len(ep.token_ids)
            budget = min(p.max_tokens_per_turn, p.max_total_tokens - used)
            if self.context is not None:
                budget = min(budget, self.context - len(ep.prompt_ids) - used)
            left = None if deadline is None else deadline - time.monotonic()
            if budget < 1 or (left is not None and left <= 0):
                ep.finish_reason = FinishReason.length if budget < 1 else FinishReason.timeout
                return
            start = time.perf_counter()
            try:
                done, version = sample(ep.prompt_ids + ep.token_ids, budget, turn_index, left)
            except TimeoutError:
                ep.finish_reason = FinishReason.timeout
                ep.errors.append(f"turn {turn_index}: generation passed episode_timeout_s")
                return
            record = TurnRecord(used, used, used, time.perf_counter() - start)
            record.policy_version, record.finish = version, done.finish_reason
            ep.turns.append(record)
            ep.extend(list(done.token_ids), list(done.logprobs))
            record.model_end = record.end = len(ep.token_ids)
            ep.text = done.text or ""
            turn = self._parse(ep.text)
            convo.add_assistant(ep.text)
            ep.messages.append(stored_message(convo.messages[-1], turn.tool_calls))
            if done.finish_reason != "stop":
                ep.finish_reason = FinishReason.length
                return
            sampled = list(done.token_ids)
            if not self._step(ep, record, key, turn, convo, sampled, deadline, turn_index):
                return
        ep.finish_reason = FinishReason.max_turns

    def _step(
        self,
        ep: Episode,
        record: TurnRecord,
        key: str,
        turn: AssistantTurn,
        convo: ConversationTokens,
        sampled: list[int],
        deadline: float | None,
        turn_index: int,
    ) -> bool:
        """The environment's answer to the turn; False when the episode ends here."""
        start = time.perf_counter()
        try:
            result = self.hosts.step(key, turn, self._timeout(deadline))
            if not isinstance(result, StepResult):
                raise TypeError(f"step returned {type(result).__name__}, not a StepResult")
            bad = _unusable(result.observation)
            if bad:
                raise TypeError(bad)
            reward = float(result.reward)
            if not math.isfinite(reward):
                raise ValueError(f"step returned the reward {reward}")
        except Exception as err:
            record.env_seconds = time.perf_counter() - start
            self._fail(ep, err, f"turn {turn_index} step")
            record.errors.append(ep.errors[-1])
            return False
        record.env_seconds = time.perf_counter() - start
        record.reward = reward
        record.info = json.dumps(result.info, default=str) if result.info else ""
        record.errors.extend(result.errors)
        ep.errors.extend(result.errors)
        ep.calls.extend((turn_index, c) for c in result.calls)
        observed = self._observe(result.observation)
        ends = (
            (result.errors and self.p.on_tool_error == OnToolError.end)
            or result.done
            or turn_index + 1 == self.p.max_turns
        )
        if ends:  # kept in the trajectory; the model sees no more turns
            ep.messages.extend(stored_message(m) for m in observed)
        if result.errors and self.p.on_tool_error == OnToolError.end:
            ep.finish_reason = FinishReason.tool_error
            return False
        if result.done:
            natural = not turn.tool_calls and not result.observation
            ep.finish_reason = FinishReason.stop if natural else FinishReason.env_done
            return False
        if ends:
            return True  # the loop ends with max_turns
        ep.messages.extend(stored_message(m) for m in observed)
        try:
            ids = convo.add_observation(observed, sampled)  # the turn's close, then the answer
        except TemplateError as err:  # the render does not extend the first messages' ids
            self._fail(ep, err, f"turn {turn_index} render")
            return False
        total = len(ep.token_ids) + len(ids)
        if total >= self.p.max_total_tokens or (
            self.context is not None and len(ep.prompt_ids) + total >= self.context
        ):
            ep.finish_reason = FinishReason.length
            return False
        ep.extend(ids)
        record.end = len(ep.token_ids)
        return True
