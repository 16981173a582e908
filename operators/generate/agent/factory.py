"""Environments from pipeline params: a ``module:Class`` built with ``env_params``, or the
tool environment over ``tools`` (built-in names or ``module:function``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operators.generate.agent.environment import Environment
from operators.generate.agent.params import AgentParams
from operators.generate.agent.python_tool import PythonTool
from operators.generate.agent.tools import Tool, ToolEnvironment, tool_schema
from rldag.config.errors import GraphError, SpecError
from rldag.graph.registry import import_target


def _python(p: AgentParams) -> Tool:
    """`python`: runs the model's code in the isolated sandbox and returns its output."""
    return PythonTool(p.sandbox_isolation, p.sandbox_slots, p.sandbox_wall_seconds).python


BUILTIN_TOOLS: dict[str, Callable[[AgentParams], Tool]] = {"python": _python}


def _target(name: str, path: str) -> Any:
    try:
        return import_target(name)
    except GraphError as err:
        raise SpecError(err.message, path=path) from None


def load_tools(p: AgentParams) -> list[Tool]:
    """The tool functions ``p.tools`` names, each checked to have a schema."""
    tools = []
    for k, name in enumerate(p.tools):
        path = f"tools.{k}"
        if ":" in name:
            tool = _target(name, path)
        elif name in BUILTIN_TOOLS:
            tool = BUILTIN_TOOLS[name](p)
        else:
            known = ", ".join(sorted(BUILTIN_TOOLS))
            raise SpecError(
                f"unknown tool {name!r} (built in: {known}; or module:function)", path=path
            )
        if not callable(tool):
            raise SpecError(f"{name!r} is not a function", path=path)
        tool_schema(tool, path)
        tools.append(tool)
    return tools


def environment_class(p: AgentParams) -> Callable[..., Environment]:
    """The class ``p.environment`` names (checked to have reset/step/close)."""
    cls = _target(p.environment, "environment")
    missing = [m for m in ("reset", "step", "close") if not callable(getattr(cls, m, None))]
    if missing:
        raise SpecError(
            f"{p.environment} is not an environment: it has no {', '.join(missing)} "
            f"(see operators/generate/agent/environment.py)",
            path="environment",
        )
    return cls


def check_environment(p: AgentParams) -> None:
    """Resolve what ``p`` names (at validation: a typo is a SpecError, nothing runs)."""
    if p.environment and p.tools:
        raise SpecError("give environment or tools, not both", path="tools")
    if p.environment:
        environment_class(p)
    else:
        load_tools(p)


def build_environment(p: AgentParams) -> Environment:
    """A new environment for one episode."""
    if p.environment:
        return environment_class(p)(**p.env_params)
    return ToolEnvironment(
        load_tools(p), tool_timeout_s=p.tool_timeout_s, parallel_tool_calls=p.parallel_tool_calls
    )
