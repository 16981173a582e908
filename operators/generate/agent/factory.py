"""Environments from pipeline params: a ``module:Class`` built with ``env_params``, or the
tool environment over ``tools`` (built-in names or ``module:function``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operators.generate.agent.environment import Environment
from operators.generate.agent.python_tool import PythonTool
from operators.generate.agent.tools import Tool, ToolEnvironment, tool_schema
from rldag import SpecError
from rldag.graph.registry import Registry, callable_target

if TYPE_CHECKING:  # the params check their environment with this module
    from operators.generate.agent.params import AgentParams

ToolFactory = Callable[["AgentParams"], Tool]


def _user_tool(path: str, found: Any) -> ToolFactory:
    """A user's tool function (``module:function``) as a factory that ignores the params."""
    tool = callable_target(path, found)
    return lambda _params: tool


def _environment_class(path: str, found: Any) -> Callable[..., Environment]:
    """A user's environment class: it must have reset, step and close."""
    missing = [m for m in ("reset", "step", "close") if not callable(getattr(found, m, None))]
    if missing:
        raise SpecError(
            f"{path} is not an environment: it has no {', '.join(missing)} "
            f"(see operators/generate/agent/environment.py)"
        )
    return found


TOOLS: Registry[ToolFactory] = Registry("tool", accept=_user_tool)
ENVIRONMENTS: Registry[Callable[..., Environment]] = Registry(
    "environment", accept=_environment_class, form="module:Class"
)


@TOOLS.register("python")
def _python(p: AgentParams) -> Tool:
    """`python`: runs the model's code in the isolated sandbox and returns its output."""
    return PythonTool(p.sandbox_isolation, p.sandbox_slots, p.sandbox_wall_seconds).python


def load_tools(p: AgentParams) -> list[Tool]:
    """The tool functions ``p.tools`` names, each checked to have a schema."""
    tools = []
    for k, name in enumerate(p.tools):
        tool = TOOLS.get(name, f"tools.{k}")(p)
        tool_schema(tool, f"tools.{k}")
        tools.append(tool)
    return tools


def environment_class(p: AgentParams) -> Callable[..., Environment]:
    """The class ``p.environment`` names (checked to have reset/step/close)."""
    return ENVIRONMENTS.get(p.environment, "environment")


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
