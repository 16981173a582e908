"""Tools as typed functions: schemas, the tool environment's failure handling and parallel
calls, loading by name, and the built-in python tool in the real sandbox."""

from __future__ import annotations

import time

import pytest

from operators.generate.agent.environment import AssistantTurn, ToolCall
from operators.generate.agent.factory import build_environment, load_tools
from operators.generate.agent.params import AgentParams
from operators.generate.agent.python_tool import PythonTool, close_sandboxes
from operators.generate.agent.tools import ToolEnvironment, tool_schema
from rldag.config.errors import SpecError
from tests.support.agent_envs import lookup, slow_tool


def add(a: int, b: float = 1.0) -> float:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def crash(x: int) -> str:
    """Always fails.

    Args:
        x: ignored
    """
    raise ValueError(f"bad {x}")


def garbage() -> object:
    """Returns an object that is not text or JSON."""
    return object()


def undocumented(x: int) -> int:
    return x


def turn(*calls: ToolCall, errors: tuple[str, ...] = ()) -> AssistantTurn:
    return AssistantTurn("text", calls, errors)


def test_schema_comes_from_signature_and_docstring():
    schema = tool_schema(add)["function"]
    assert schema["name"] == "add" and schema["description"] == "Add two numbers."
    assert schema["parameters"]["properties"]["a"] == {
        "type": "integer",
        "description": "the first number",
    }
    assert schema["parameters"]["required"] == ["a"]


def test_a_tool_without_a_docstring_is_refused_naming_it():
    with pytest.raises(SpecError, match="tool 'undocumented' has no usable schema"):
        tool_schema(undocumented, "tools.1")


def test_calls_run_and_their_results_become_tool_messages():
    env = ToolEnvironment([add, lookup])
    result = env.step(turn(ToolCall("add", {"a": 2, "b": 0.5}), ToolCall("lookup", {"key": 9})))
    assert result.observation == [
        {"role": "tool", "name": "add", "content": "2.5"},
        {"role": "tool", "name": "lookup", "content": "fact 2"},
    ]
    assert [c.name for c in result.calls] == ["add", "lookup"] and result.errors == []
    assert not result.done


def test_a_turn_without_calls_ends_the_episode():
    assert ToolEnvironment([add]).step(turn()).done


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (ToolCall("crash", {"x": 3}), "tool 'crash' raised ValueError: bad 3"),
        (ToolCall("garbage", {}), "returned an unusable object"),
        (ToolCall("add", {"c": 1}), "unexpected keyword argument 'c'"),
        (ToolCall("nope", {}), "unknown tool 'nope' (tools: add, crash, garbage)"),
    ],
)
def test_a_failing_call_is_an_error_observation_not_an_exception(call, error):
    result = ToolEnvironment([add, crash, garbage]).step(turn(call))
    assert error in result.observation[0]["content"]
    assert result.observation[0]["content"].startswith("Error: ")
    assert len(result.errors) == 1 and error in result.errors[0]
    assert result.calls[0].error == result.errors[0]


def test_a_hanging_call_times_out_into_an_error_observation():
    env = ToolEnvironment([slow_tool], tool_timeout_s=0.2)
    start = time.perf_counter()
    result = env.step(turn(ToolCall("slow_tool", {"seconds": 3})))
    assert time.perf_counter() - start < 1.5
    assert "timed out after 0.2s" in result.errors[0]


def test_parse_errors_are_reported_to_the_model():
    result = ToolEnvironment([add]).step(turn(errors=("tool call 0: not JSON",)))
    assert result.observation == [{"role": "tool", "content": "Error: tool call 0: not JSON"}]
    assert result.errors == ["tool call 0: not JSON"] and not result.done


@pytest.mark.parametrize(("parallel", "at_least", "at_most"), [(1, 0.6, 5.0), (3, 0.0, 0.75)])
def test_calls_of_one_turn_run_in_parallel_up_to_the_bound(parallel, at_least, at_most):
    env = ToolEnvironment([slow_tool], parallel_tool_calls=parallel)
    calls = [ToolCall("slow_tool", {"seconds": 0.3}) for _ in range(3)]
    start = time.perf_counter()
    env.step(turn(*calls))
    assert at_least <= time.perf_counter() - start <= at_most


def test_tools_load_by_builtin_name_or_module_path():
    tools = load_tools(
        AgentParams(model_path="m", tools=["python", "tests.support.agent_envs:lookup"])
    )
    assert [tool_schema(t)["function"]["name"] for t in tools] == ["python", "lookup"]
    with pytest.raises(
        SpecError, match=r"tools.0: unknown tool 'pyhton' \(known: python; or module:function"
    ):
        AgentParams(model_path="m", tools=["pyhton"])
    with pytest.raises(
        SpecError, match="tools.0: module 'tests.support.agent_envs' has no attribute"
    ):
        AgentParams(model_path="m", tools=["tests.support.agent_envs:nothing"])


def test_an_environment_class_is_checked_and_built_with_its_params():
    env = build_environment(
        AgentParams(
            model_path="m", environment="tests.support.agent_envs:EchoEnv", env_params={"turns": 5}
        )
    )
    assert env.turns == 5
    with pytest.raises(
        SpecError, match="environment: tests.support.agent_envs:lookup is not an env"
    ):
        AgentParams(model_path="m", environment="tests.support.agent_envs:lookup")


def test_the_python_tool_runs_code_in_the_isolated_sandbox():
    tool = PythonTool(isolation="full", slots=1, wall_seconds=2.0).python
    try:
        assert tool("print(6 * 7)") == "42\n"
        failed = tool("import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)")
        assert "[error, exit 1]" in failed  # no network in the sandbox
        assert "[timeout" in tool("while True: pass")
    finally:
        close_sandboxes()
