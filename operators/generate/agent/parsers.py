"""Tool-call parsers: assistant text -> ``AssistantTurn`` (its tool calls and parse errors).

A parser is one function ``text -> AssistantTurn`` registered by name; ``hermes`` (Qwen2.5/3
and most open models: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several
per turn) is built in. ``tool_parser`` also takes ``module:function`` for user formats.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from operators.generate.agent.environment import AssistantTurn, ToolCall
from rldag import Registry

ToolParser = Callable[[str], AssistantTurn]

TOOL_PARSERS: Registry[ToolParser] = Registry("tool-call parser")
# Decorator: make a parser known by ``name`` (``tool_parser: name`` in pipeline.yaml).
register_tool_parser = TOOL_PARSERS.register


def tool_parser(name: str, path: str = "tool_parser") -> ToolParser:
    """The parser registered as ``name``, or the ``module:function`` it names."""
    return TOOL_PARSERS.get(name, path)


_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def _call(body: str, index: int) -> ToolCall | str:
    """One hermes call body as a ToolCall, or the reason it is not one."""
    if not body.strip():
        return f"tool call {index}: empty <tool_call> block"
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as err:
        return f"tool call {index}: not JSON ({err.msg} at character {err.pos})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return f'tool call {index}: expected {{"name": ..., "arguments": {{...}}}}'
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some models emit the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f"tool call {index} ({obj['name']}): arguments are not JSON"
    if not isinstance(arguments, dict):
        return f"tool call {index} ({obj['name']}): arguments must be an object"
    return ToolCall(obj["name"], arguments, id=f"call_{index}")


@register_tool_parser("hermes")
def hermes(text: str) -> AssistantTurn:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, any number; an
    unclosed block, bad JSON or a call without a name is a parse error. When every block
    parsed, ``content`` is the text around them."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for index, match in enumerate(_HERMES.finditer(text)):
        closed = match.group(0).endswith("</tool_call>")
        found = _call(match.group(1), index) if closed else f"tool call {index}: unclosed"
        (calls if isinstance(found, ToolCall) else errors).append(found)
    content = _HERMES.sub("", text).strip() if calls and not errors else None
    return AssistantTurn(text, tuple(calls), tuple(errors), content)


@register_tool_parser("none")
def no_tool_calls(text: str) -> AssistantTurn:
    """Plain text turns (simulators that read the text itself)."""
    return AssistantTurn(text)
