"""The environment contract: what an agent episode talks to between two model turns.

One instance per episode (built from ``module:Class`` with the node's ``env_params``), hosted on
the environment pool. Gym-like: ``reset(row)`` starts the episode from the row's columns and
returns the messages that follow the row's prompt (often none); ``step(turn)`` answers one
assistant turn. Messages are chat dicts (``role``, ``content``; tool results have ``role:
tool``) rendered by the policy's chat template, token in / token out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]  # {"role": ..., "content": ..., optional "tool_calls"/"name"}


@dataclass(frozen=True)
class ToolCall:
    """One tool call parsed from an assistant turn (``arguments`` already decoded)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class AssistantTurn:
    """What the model said in one turn: its text, the tool calls parsed from it, and the
    parser's complaints about calls it could not read (each becomes an error observation)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    parse_errors: tuple[str, ...] = ()
    content: str | None = None  # the text outside the calls, where the parser can tell


@dataclass(frozen=True)
class CallRecord:
    """What one tool call did: stored with the trajectory (``tool_calls`` column)."""

    name: str
    arguments: str  # JSON
    error: str = ""  # empty when the call returned a usable result
    seconds: float = 0.0


@dataclass
class StepResult:
    """The environment's answer to one assistant turn."""

    observation: list[Message] = field(default_factory=list)  # appended before the next turn
    reward: float = 0.0  # this turn's reward (summed into the episode reward)
    done: bool = False  # the episode ends here (finish_reason env_done)
    info: dict[str, Any] = field(default_factory=dict)  # JSON-able, stored with the turn
    calls: list[CallRecord] = field(default_factory=list)  # tool calls this step ran
    errors: list[str] = field(default_factory=list)  # tool/parse errors (on_tool_error decides)


@runtime_checkable
class Environment(Protocol):
    """An episode's environment: a tool set, a sandbox, a simulator."""

    def reset(self, row: Mapping[str, Any]) -> list[Message]: ...

    def step(self, turn: AssistantTurn) -> StepResult: ...

    def close(self) -> None: ...


@runtime_checkable
class OffersTools(Protocol):
    """An environment whose tools the chat template lists (``apply_chat_template(tools=)``)."""

    def tool_schemas(self) -> list[dict[str, Any]]: ...
