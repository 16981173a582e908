"""Tools are plain typed Python functions; a ``ToolEnvironment`` offers a list of them.

A tool's JSON schema comes from its signature and docstring (``Args:`` section, as
``transformers.utils.get_json_schema`` reads it) and is passed to the chat template's
``tools=``. Each turn's calls run concurrently (at most ``parallel_tool_calls`` at once), each
bounded by ``tool_timeout_s``; a call that names no tool, has bad arguments, raises, hangs or
returns something that is not text/JSON becomes an error observation, never an exception.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from operators.generate.agent.deadline import CallTimeout, call_with_deadline, in_worker
from operators.generate.agent.environment import (
    AssistantTurn,
    CallRecord,
    Message,
    StepResult,
    ToolCall,
)
from rldag import SpecError

Tool = Callable[..., Any]


def tool_schema(tool: Tool, path: str = "tools") -> dict[str, Any]:
    """The OpenAI-style function schema of ``tool`` from its signature and docstring."""
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(tool)
    except Exception as err:  # DocstringParsingException, TypeHintParsingException
        name = getattr(tool, "__name__", repr(tool))
        raise SpecError(
            f"tool {name!r} has no usable schema: {err} (give it type hints and a docstring "
            f"with an Args: line per parameter)",
            path=path,
        ) from None


def tool_output(value: Any) -> str:
    """A tool's return value as observation text; raises TypeError when it is not text or
    JSON-serialisable."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise TypeError(f"returned an unusable {type(value).__name__}") from None


def _error_message(text: str, name: str = "") -> Message:
    message: Message = {"role": "tool", "content": f"Error: {text}"}
    if name:
        message["name"] = name
    return message


class ToolEnvironment:
    """An environment over a list of tools: the episode ends on a turn without tool calls."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        tool_timeout_s: float = 30.0,
        parallel_tool_calls: int = 4,
    ) -> None:
        self.schemas = [tool_schema(t) for t in tools]
        self.tools = {s["function"]["name"]: t for s, t in zip(self.schemas, tools, strict=True)}
        self.tool_timeout_s = tool_timeout_s
        self._slots = threading.Semaphore(max(1, parallel_tool_calls))

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.schemas

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        return []

    def step(self, turn: AssistantTurn) -> StepResult:
        if not turn.tool_calls and not turn.parse_errors:
            return StepResult(done=True)
        results: list[tuple[Message, CallRecord] | None] = [None] * len(turn.tool_calls)

        def run(k: int, call: ToolCall) -> None:
            with self._slots:
                results[k] = self._call(call)

        calls = [in_worker(partial(run, k, c)) for k, c in enumerate(turn.tool_calls)]
        for call in calls:
            call.result()  # run never raises: _call records errors
        out = StepResult(observation=[_error_message(e) for e in turn.parse_errors])
        out.errors.extend(turn.parse_errors)
        for message, record in results:
            out.observation.append(message)
            out.calls.append(record)
            if record.error:
                out.errors.append(record.error)
        return out

    def _call(self, call: ToolCall) -> tuple[Message, CallRecord]:
        """One call's observation and record (errors included, never raised)."""
        arguments = json.dumps(call.arguments, sort_keys=True, default=str)
        start = time.perf_counter()
        tool = self.tools.get(call.name)
        error = ""
        if tool is None:
            error = f"unknown tool {call.name!r} (tools: {', '.join(sorted(self.tools))})"
        else:
            try:
                text = tool_output(
                    call_with_deadline(lambda: tool(**call.arguments), self.tool_timeout_s)
                )
            except CallTimeout:
                error = f"tool {call.name!r} timed out after {self.tool_timeout_s:g}s"
            except TypeError as err:
                error = f"tool {call.name!r}: {err}"
            except Exception as err:
                error = f"tool {call.name!r} raised {type(err).__name__}: {err}"
        record = CallRecord(call.name, arguments, error, time.perf_counter() - start)
        if error:
            return _error_message(error, call.name), record
        return {"role": "tool", "name": call.name, "content": text}, record

    def close(self) -> None:
        pass
