"""One episode's session: its requests stitched into one trajectory, token in / token out.

The first chat request's messages (and tools) are rendered with the chat template: the prompt
ids. Each later request must extend the session: the same messages, then the assistant reply
the gateway returned (one of its ``n`` choices: the one kept is the one the agent sent back),
then new messages (tool results, user turns), and the same tools. The kept choice's sampled
ids go into the trajectory exactly (mask 1, with their log-probs), the new messages as the
template extends the conversation after them (mask 0, ``render.ConversationTokens``), and the
model continues from exactly those ids. Completions sessions work the same on text (or token
ids): a prompt must start with the session's text and a returned choice; what follows is
tokenised on its own as environment tokens.

A request that does not extend the session (the agent rewrote or trimmed its history, changed
its tools, or retried an old request) is recorded in the episode's errors and handled by
``on_rewrite``: ``split`` starts a new segment from that request (the row keeps the last
segment, the one the reward judges; ``rewrites`` counts the splits) and ``reject`` answers it
400 ``history_rewritten``. Nothing is ever re-tokenised from text already in the trajectory.
Budgets (``max_turns`` requests, ``max_tokens_per_turn``, ``max_total_tokens``, the model's
context) end the episode: the request that passes one gets an empty choice with finish reason
``length``, as does every later one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from operators.generate.agent.environment import AssistantTurn, CallRecord
from operators.generate.agent.episode import Episode, TurnRecord, stored_message
from operators.generate.agent.loop import turn_seed
from operators.generate.agent.params import FinishReason
from operators.generate.agent.parsers import ToolParser
from operators.generate.agent.render import ConversationTokens, TemplateError
from operators.generate.gateway.openai_requests import (
    APIError,
    ChatRequest,
    CompletionRequest,
    Message,
    Sampling,
    canonical_json,
)
from operators.generate.gateway.params import GatewayParams, OnRewrite
from operators.model.prompts import encode_prompt
from operators.rollout.sampling import Completion, SamplingParams

if TYPE_CHECKING:
    from operators.generate.agent.samplers import LoopTurns, ServerTurns

T = TypeVar("T")


@dataclass
class SessionSetup:
    """What every session of one generate step shares."""

    params: GatewayParams
    tokenizer: Any
    parse: ToolParser
    sampler: LoopTurns | ServerTurns
    sampling: SamplingParams  # the node's (n and max_new_tokens are set per request)
    seed_base: int
    context: int | None  # the model's positions (None: unbounded)


@dataclass
class Choice:
    """One sampled choice of a request, as returned to the agent."""

    completion: Completion
    version: int
    turn: AssistantTurn
    message: Message  # the assistant message as returned (what the next request sends back)
    seconds: float


@dataclass
class Segment:
    """The trajectory since the session's first request (or its last split)."""

    episode: Episode = field(default_factory=Episode)
    convo: ConversationTokens | None = None  # chat sessions
    history: list[Message] = field(default_factory=list)  # chat: the messages so far
    tools_key: str = ""
    text: str = ""  # completions sessions: the text so far


class Session:
    """See the module docstring; its methods run on the gateway's event loop."""

    def __init__(self, setup: SessionSetup, key: str, prompt_id: int, sample_idx: int) -> None:
        self.setup, self.key = setup, key
        self.prompt_id, self.sample_idx = prompt_id, sample_idx
        self.kind = ""  # chat | completion, fixed by the first request
        self.seg: Segment | None = None
        self.pending: list[Choice] = []
        self.requests = self.rewrites = self.bad_requests = 0
        self.errors: list[str] = []
        self.ended = ""  # the finish reason once a budget ended the episode
        self.closed = False
        self.home = _running_loop()  # the agents' loop: every request of the session runs there
        self._order = asyncio.Lock()  # one request at a time (each must see the last one's end)
        self._state = threading.Lock()  # against `finish` from the agents' thread

    # ---- requests --------------------------------------------------------------------------

    async def served(self, request: Awaitable[T]) -> T:
        """``request`` (one of this session's coroutines) run on the session's home loop:
        a request over HTTP arrives on the server's loop, the agent's handed client on the
        agents' loop, and the session's order lock must see them all on one loop."""
        if self.home is None or self.home is asyncio.get_running_loop():
            return await request
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(request, self.home))

    async def chat(self, request: ChatRequest) -> list[Choice]:
        async with self._order:
            with self._state:
                ids = self._context(request, "chat")
            return await self._sample(ids, request.sampling, request.parse_calls)

    async def complete(self, request: CompletionRequest) -> list[Choice]:
        async with self._order:
            with self._state:
                ids = self._context(request, "completion")
            return await self._sample(ids, request.sampling, False)

    def refused(self, err: APIError) -> None:
        """Record a request answered with an error (the agent's, or the gateway's)."""
        with self._state:
            self.bad_requests += err.status < 500
            self.errors.append(f"request {self.requests}: {err.status} {err.message}")

    def _context(self, request: ChatRequest | CompletionRequest, kind: str) -> list[int] | None:
        """The ids the model continues for ``request`` (None: a budget ended the episode)."""
        if self.closed:
            raise APIError(404, "the session ended", code="session_not_found")
        if self.kind and self.kind != kind:
            raise APIError(
                400,
                f"this session is a {self.kind} session: use one endpoint",
                param=None,
                code="session_kind",
            )
        self.kind = kind
        self.requests += 1
        if self.ended:
            return None
        if self.seg is not None:
            extension = self._extend(request)
            if extension is not None:
                return self._continue(*extension)
        self.pending = []
        self.seg = self._start(request)
        return list(self.seg.episode.prompt_ids)

    def _continue(self, choice: Choice, ids: list[int], new: list[Any]) -> list[int] | None:
        """Commit the choice the agent kept, then the environment's ids (unless a budget ends
        the episode here)."""
        seg = self.seg
        assert seg is not None
        self._commit(choice)
        ep = seg.episode
        if self.requests > self.setup.params.max_turns:
            self.ended = FinishReason.max_turns
        elif self._left(len(ep.token_ids) + len(ids)) < 1:
            self.ended = FinishReason.length
        if self.ended:
            return None
        ep.extend(ids)
        ep.turns[-1].end = len(ep.token_ids)
        ep.messages.extend(new)
        return ep.prompt_ids + ep.token_ids

    def _left(self, used: int) -> int:
        p, seg = self.setup.params, self.seg
        assert seg is not None
        left = min(p.max_tokens_per_turn, p.max_total_tokens - used)
        if self.setup.context is not None:
            left = min(left, self.setup.context - len(seg.episode.prompt_ids) - used)
        return left

    # ---- chat and text -----------------------------------------------------------------------

    def _start(self, request: ChatRequest | CompletionRequest) -> Segment:
        """A new segment whose prompt is ``request``'s."""
        tok = self.setup.tokenizer
        if isinstance(request, CompletionRequest):
            prompt = request.prompt
            ids = list(prompt) if isinstance(prompt, tuple) else encode_prompt(tok, prompt)
            text = prompt if isinstance(prompt, str) else tok.decode(ids)
            seg = Segment(Episode(prompt_ids=ids), text=text)
            seg.episode.messages = [stored_message({"role": "prompt", "content": text})]
            return seg
        rendered = [m.rendered() for m in request.messages]
        convo = ConversationTokens(tok, rendered, list(request.tools) or None)
        seg = Segment(Episode(prompt_ids=convo.prompt_ids), convo, list(request.messages))
        seg.tools_key = request.tools_key
        seg.episode.messages = [stored_message(m) for m in convo.messages]
        return seg

    def _extend(self, request: ChatRequest | CompletionRequest) -> tuple | None:
        """(kept choice, environment ids, stored messages) when ``request`` extends the
        session; else the rewrite is recorded, and refused under ``on_rewrite: reject``."""
        if isinstance(request, ChatRequest):
            found = self._chat_extends(request)
        else:
            found = self._text_extends(request) or "its prompt does not continue a choice"
        if isinstance(found, tuple):
            return found
        message = f"the request does not extend the session ({found}): the history was rewritten"
        self.errors.append(f"request {self.requests}: {message}")
        if self.setup.params.on_rewrite is OnRewrite.reject:
            raise APIError(
                400, message + " (on_rewrite: reject)", param="messages", code="history_rewritten"
            )
        self.rewrites += 1
        return None

    def _chat_extends(self, request: ChatRequest) -> tuple | str:
        seg = self.seg
        assert seg is not None and seg.convo is not None
        history, messages = seg.history, request.messages
        if request.tools_key != seg.tools_key:
            return "its tools differ from the session's"
        if len(messages) <= len(history):
            return f"{len(messages)} messages, the session has {len(history)} and a reply"
        for i, (old, new) in enumerate(zip(history, messages, strict=False)):
            if old != new:
                return f"messages[{i}] differs from the session's"
        reply = messages[len(history)]
        choice = next((c for c in self.pending if _same_reply(c.message, reply)), None)
        if choice is None:
            return f"messages[{len(history)}] is not an assistant reply the gateway returned"
        new = list(messages[len(history) + 1 :])
        rendered = [m.rendered() for m in new]
        seg.convo.add_assistant(choice.completion.text or "")
        try:
            ids = seg.convo.add_observation(rendered, list(choice.completion.token_ids))
        except TemplateError as err:
            raise APIError(500, str(err), type="server_error", code="template_error") from None
        seg.history.extend([choice.message, *new])
        return choice, ids, [stored_message(m) for m in rendered]

    def _text_extends(self, request: CompletionRequest) -> tuple | None:
        seg = self.seg
        assert seg is not None
        ep, tok = seg.episode, self.setup.tokenizer
        for choice in self.pending:
            sampled = list(choice.completion.token_ids)
            if isinstance(request.prompt, tuple):
                base = ep.prompt_ids + ep.token_ids + sampled
                if list(request.prompt[: len(base)]) == base:
                    ids = list(request.prompt[len(base) :])
                    seg.text += (choice.completion.text or "") + tok.decode(ids)
                    return (
                        choice,
                        ids,
                        [stored_message({"role": "environment", "content": tok.decode(ids)})],
                    )
                continue
            base_text = seg.text + (choice.completion.text or "")
            if request.prompt.startswith(base_text):
                suffix = request.prompt[len(base_text) :]
                ids = tok.encode(suffix, add_special_tokens=False) if suffix else []
                seg.text = request.prompt
                return choice, ids, [stored_message({"role": "environment", "content": suffix})]
        return None

    # ---- sampling and the trajectory ---------------------------------------------------------

    async def _sample(self, ids: list[int] | None, asked: Sampling, parse: bool) -> list[Choice]:
        setup = self.setup
        if ids is None:  # a budget ended the episode: an empty "length" choice per n
            empty = Completion([], [], "length", "")
            return [Choice(empty, 0, AssistantTurn(""), Message("assistant", ""), 0.0)] * asked.n
        with self._state:
            budget = self._left(len(ids) - len(self.seg.episode.prompt_ids))
        if budget < 1:
            with self._state:
                self.ended = FinishReason.length
            return await self._sample(None, asked, parse)
        if asked.max_tokens is not None:
            budget = min(budget, asked.max_tokens)
        params = replace(
            setup.sampling,
            n=asked.n,
            max_new_tokens=budget,
            stop=(*setup.sampling.stop, *asked.stop),
        )
        seed = turn_seed(setup.seed_base, self.prompt_id, self.sample_idx, self.requests - 1)
        start = time.perf_counter()
        future = setup.sampler.submit(ids, params, seed, self.key if asked.n == 1 else None)
        (completions,), version = await asyncio.wrap_future(future)
        seconds = time.perf_counter() - start
        if any(c.finish_reason == "abort" for c in completions):
            raise APIError(
                503,
                "the engine aborted the request (a weight update)",
                type="server_error",
                code="aborted",
            )
        choices = [self._choice(c, int(version), parse, seconds) for c in completions]
        with self._state:
            if self.closed:
                raise APIError(404, "the session ended while sampling", code="session_not_found")
            self.pending = choices
        return choices

    def _choice(self, c: Completion, version: int, parse: bool, seconds: float) -> Choice:
        text = c.text or ""
        turn = AssistantTurn(text)
        if parse:
            try:
                turn = self.setup.parse(text)
            except Exception as err:  # a parser that raises: the text is the content
                turn = AssistantTurn(text, (), (f"the tool-call parser raised {err!r}",))
        calls = () if turn.parse_errors else turn.tool_calls
        content = turn.content if calls and turn.content is not None else text
        message = Message(
            "assistant",
            content,
            tool_calls=tuple((t.name, canonical_json(t.arguments)) for t in calls),
        )
        return Choice(c, version, replace(turn, tool_calls=calls), message, seconds)

    def _commit(self, choice: Choice) -> None:
        """The kept choice's sampled ids, exactly, into the trajectory."""
        seg = self.seg
        assert seg is not None
        ep, c = seg.episode, choice.completion
        used = len(ep.token_ids)
        record = TurnRecord(
            used,
            used,
            used,
            choice.seconds,
            policy_version=choice.version,
            finish=c.finish_reason,
            errors=list(choice.turn.parse_errors),
        )
        ep.turns.append(record)
        ep.extend(list(c.token_ids), list(c.logprobs))
        record.model_end = record.end = len(ep.token_ids)
        ep.text = c.text or ""
        index = len(ep.turns) - 1
        ep.calls.extend((index, CallRecord(n, a)) for n, a in choice.message.tool_calls)
        assistant = {"role": "assistant", "content": ep.text}
        ep.messages.append(stored_message(assistant, choice.turn.tool_calls))
        self.pending = []

    def finish(self) -> Episode:
        """Close the session; its trajectory (the last choice returned kept: the first of its
        ``n``), whose finish reason is the budget's that ended it, else the last turn's."""
        with self._state:
            self.closed = True
            if self.seg is None:
                return Episode(errors=list(self.errors))
            if self.pending:
                self._commit(self.pending[0])
            ep = self.seg.episode
            ep.errors = list(self.errors)
            last = ep.turns[-1].finish if ep.turns else "stop"
            ep.finish_reason = self.ended or (FinishReason.length if last == "length" else "stop")
            return ep


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running now (None outside one)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _same_reply(ours: Message, theirs: Message) -> bool:
    """Whether the agent sent back this reply (content and calls; ids and names aside)."""
    return (
        theirs.role == "assistant"
        and theirs.content == ours.content
        and theirs.tool_calls == ours.tool_calls
    )
