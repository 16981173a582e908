"""OpenAI response bodies from a session's choices: chat completions (with ``tool_calls`` and
per-token ``logprobs``), text completions and the model list."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operators.generate.gateway.session import Choice

# Response ids: this process's random prefix and a count (a uuid4 per response cost a system
# call, and a turn of the GIL to the engine thread, on every request).
_PROCESS = secrets.token_hex(8)
_COUNT = itertools.count()


def _finish(choice: Choice) -> str:
    if choice.message.tool_calls:
        return "tool_calls"
    return "length" if choice.completion.finish_reason == "length" else "stop"


def _usage(prompt_tokens: int, choices: Sequence[Choice]) -> dict[str, int]:
    completion = sum(len(c.completion.token_ids) for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def _token_logprobs(tokenizer: Any, choice: Choice) -> list[dict[str, Any]]:
    """One entry per sampled token: its text, bytes and log-prob (no top alternatives)."""
    out = []
    for token, logprob in zip(choice.completion.token_ids, choice.completion.logprobs, strict=True):
        text = tokenizer.decode([token])
        out.append(
            {
                "token": text,
                "logprob": float(logprob),
                "bytes": list(text.encode()),
                "top_logprobs": [],
            }
        )
    return out


def chat_body(
    model: str,
    choices: Sequence[Choice],
    prompt_tokens: int,
    *,
    tokenizer: Any,
    logprobs: bool,
    call_prefix: str,
) -> dict[str, Any]:
    """A ``chat.completion``; tool-call ids are ``<call_prefix>_<choice>_<call>``."""
    out = []
    for j, choice in enumerate(choices):
        calls = [
            {
                "id": f"{call_prefix}_{j}_{k}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for k, (name, arguments) in enumerate(choice.message.tool_calls)
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": choice.message.content if choice.message.content or not calls else None,
            "refusal": None,
        }
        if calls:
            message["tool_calls"] = calls
        entry: dict[str, Any] = {"index": j, "message": message, "finish_reason": _finish(choice)}
        entry["logprobs"] = (
            {"content": _token_logprobs(tokenizer, choice), "refusal": None} if logprobs else None
        )
        out.append(entry)
    return _response("chatcmpl", "chat.completion", model, out, _usage(prompt_tokens, choices))


def completion_body(
    model: str, choices: Sequence[Choice], prompt_tokens: int, *, tokenizer: Any, logprobs: bool
) -> dict[str, Any]:
    """A ``text_completion`` (``logprobs``: the sampled tokens' own; ``top_logprobs`` null)."""
    out = []
    for j, choice in enumerate(choices):
        entry: dict[str, Any] = {
            "index": j,
            "text": choice.completion.text or "",
            "finish_reason": _finish(choice),
            "logprobs": None,
        }
        if logprobs:
            tokens = [tokenizer.decode([t]) for t in choice.completion.token_ids]
            offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
            entry["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": [float(x) for x in choice.completion.logprobs],
                "top_logprobs": None,
                "text_offset": offsets,
            }
        out.append(entry)
    return _response("cmpl", "text_completion", model, out, _usage(prompt_tokens, choices))


def models_body(model: str) -> dict[str, Any]:
    """``GET /v1/models``: the one model the gateway serves."""
    entry = {"id": model, "object": "model", "created": 0, "owned_by": "rldag"}
    return {"object": "list", "data": [entry]}


def error_json(status: int, message: str) -> dict[str, Any]:
    """A refusal of the gateway's door (bearer token, body size) in OpenAI's shape."""
    code = {401: "invalid_api_key", 413: "request_too_large"}.get(status)
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }


def _response(
    prefix: str, kind: str, model: str, choices: list[dict[str, Any]], usage: dict[str, Any]
) -> dict[str, Any]:
    """The response object around `choices`: a fresh id, its `object` kind, the time."""
    return {
        "id": f"{prefix}-{_PROCESS}{next(_COUNT):016x}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
    }
