"""OpenAI request bodies, parsed and checked: ``/v1/chat/completions`` and ``/v1/completions``.

What the gateway cannot honour exactly is refused with an OpenAI-style 4xx error naming the
field (``APIError``), never half-honoured: streaming, constrained decoding (``tool_choice``
``required`` or a named function, ``response_format``), penalties and ``logit_bias`` (they
would change the distribution the recorded log-probs come from), top log-probs, and a
``temperature`` or ``top_p`` other than the node's (the trainer corrects with the node's).
Fields that change nothing sampled (``user``, ``seed``, ``metadata``, ``parallel_tool_calls``,
...) are accepted and ignored: the node's seed decides every sample.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_CHOICES = 16  # `n` per request
ROLES = ("system", "developer", "user", "assistant", "tool")


class APIError(Exception):
    """A request the gateway answers with an OpenAI-style error (``body``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = (
            status,
            message,
            param,
            code,
            type,
        )

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class Message:
    """A chat message in a comparable form: two requests' histories are equal when their
    messages are (tool-call arguments compared as JSON values, not strings)."""

    role: str
    content: str
    name: str = ""
    tool_call_id: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments as canonical JSON)

    def rendered(self) -> dict[str, Any]:
        """The message as chat templates take it (tool-call arguments as objects)."""
        out: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role}
        out["content"] = self.content
        if self.name:
            out["name"] = self.name
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = [
                {"type": "function", "function": {"name": n, "arguments": json.loads(a)}}
                for n, a in self.tool_calls
            ]
        return out


@dataclass(frozen=True)
class Sampling:
    """What a request asks of the sampler beyond the node's params."""

    n: int = 1
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    tools_key: str  # the tools as canonical JSON (a session keeps its tools)
    parse_calls: bool  # tool_choice is not "none"
    sampling: Sampling


@dataclass(frozen=True)
class CompletionRequest:
    prompt: str | tuple[int, ...]
    sampling: Sampling


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _bad(message: str, param: str, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def _unsupported(param: str, why: str) -> APIError:
    return _bad(f"'{param}' is not supported by the rldag gateway: {why}", param, "unsupported")


def _int(body: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'{key}' must be an integer, got {value!r:.40}", key, "invalid_type")
    if value < low or (high is not None and value > high):
        top = f" and at most {high}" if high is not None else ""
        raise _bad(f"'{key}' must be at least {low}{top}, got {value}", key, "invalid_value")
    return value


def _same_as_node(body: Mapping[str, Any], key: str, node: float) -> None:
    """``key`` absent, or the node's value (the trainer corrects with the node's)."""
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(f"'{key}' must be a number, got {value!r:.40}", key, "invalid_type")
    if float(value) != float(node):
        raise _bad(
            f"'{key}' is {value}, but this node samples at {key} {node} (the trainer's): drop "
            f"'{key}' from the request or set the node's params.{key}",
            key,
            "unsupported_value",
        )


def _refuse_changes(body: Mapping[str, Any]) -> None:
    if body.get("stream"):
        raise _unsupported("stream", "ask for whole responses (stream: false)")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key):
            raise _unsupported(key, "it would change the distribution the log-probs record")
    if body.get("logit_bias"):
        raise _unsupported("logit_bias", "it would change the distribution the log-probs record")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _bad("'model' is required (any id: the gateway serves the policy)", "model")


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _bad("'stop' must be a non-empty string or a list of them", "stop", "invalid_type")
    return tuple(stops)


def _sampling(body: Mapping[str, Any], temperature: float, top_p: float) -> Sampling:
    _refuse_changes(body)
    _same_as_node(body, "temperature", temperature)
    _same_as_node(body, "top_p", top_p)
    max_tokens = _int(body, "max_completion_tokens", 1) or _int(body, "max_tokens", 1)
    return Sampling(_int(body, "n", 1, MAX_CHOICES) or 1, max_tokens, _stop(body))


def _content(value: Any, param: str) -> str:
    """Text content: a string, None, or a list of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise _unsupported(f"{param}[{j}]", "only text content parts are")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise _bad(f"'{param}' must be a string or a list of parts", param, "invalid_type")


def _tool_calls(value: Any, param: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad(f"'{param}' must be a list", param, "invalid_type")
    calls = []
    for j, call in enumerate(value):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise _bad(f"'{param}[{j}]' needs function.name", f"{param}[{j}]")
        try:
            arguments = json.loads(fn.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            where = f"{param}[{j}].function.arguments"
            raise _bad(f"'{where}' is not a JSON string", where) from None
        calls.append((fn["name"], canonical_json(arguments)))
    return tuple(calls)


def parse_message(raw: Any, index: int) -> Message:
    param = f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise _bad(f"'{param}' must be an object", param, "invalid_type")
    role = raw.get("role")
    if role not in ROLES:
        raise _bad(f"'{param}.role' must be one of {', '.join(ROLES)}, got {role!r}", param)
    return Message(
        role,
        _content(raw.get("content"), f"{param}.content"),
        str(raw.get("name") or ""),
        str(raw.get("tool_call_id") or ""),
        _tool_calls(raw.get("tool_calls"), f"{param}.tool_calls") if role == "assistant" else (),
    )


def _tools(body: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list", "tools", "invalid_type")
    for j, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if tool.get("type") != "function" or not isinstance(fn, Mapping) or not fn.get("name"):
            raise _bad(
                f"'tools[{j}]' must be {{type: function, function: {{name, ...}}}}", f"tools[{j}]"
            )
    return tuple(dict(t) for t in tools)


def parse_chat(body: Any, temperature: float, top_p: float) -> ChatRequest:
    """A checked chat request (``temperature``/``top_p``: the node's)."""
    if not isinstance(body, Mapping):
        raise _bad("the body must be a JSON object", "body")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _bad("'messages' must be a non-empty list", "messages")
    sampling = _sampling(body, temperature, top_p)
    if body.get("top_logprobs"):
        raise _unsupported("top_logprobs", "the engine records the sampled token's alone")
    choice = body.get("tool_choice", "auto")
    if choice not in ("auto", "none", None):
        raise _unsupported("tool_choice", "decoding is not constrained (use auto or none)")
    if (
        isinstance(body.get("response_format"), Mapping)
        and body["response_format"].get("type", "text") != "text"
    ):
        raise _unsupported("response_format", "decoding is not constrained")
    tools = _tools(body)
    return ChatRequest(
        tuple(parse_message(m, i) for i, m in enumerate(raw)),
        tools,
        canonical_json(list(tools)),
        choice != "none",
        Sampling(sampling.n, sampling.max_tokens, sampling.stop, bool(body.get("logprobs"))),
    )


def parse_completion(body: Any, temperature: float, top_p: float) -> CompletionRequest:
    """A checked completions request: one prompt, text or token ids."""
    if not isinstance(body, Mapping):
        raise _bad("the body must be a JSON object", "body")
    prompt = body.get("prompt")
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        prompt = tuple(prompt)
    elif not isinstance(prompt, str) or not prompt:
        raise _bad("'prompt' must be one non-empty string or one list of token ids", "prompt")
    sampling = _sampling(body, temperature, top_p)
    for key in ("echo", "suffix"):
        if body.get(key):
            raise _unsupported(key, "a session's completions continue its prompt as sampled")
    if (_int(body, "best_of", 1) or 1) > 1:
        raise _unsupported("best_of", "ask for n choices instead")
    logprobs = _int(body, "logprobs", 0, 5)
    stops = sampling.stop
    return CompletionRequest(
        prompt, Sampling(sampling.n, sampling.max_tokens, stops, logprobs is not None)
    )
