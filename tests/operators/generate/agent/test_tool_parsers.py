"""The tool-call parser registry and the hermes format."""

from __future__ import annotations

import pytest

from operators.generate.agent.environment import ToolCall
from operators.generate.agent.parsers import hermes, register_tool_parser, tool_parser
from rldag.config.errors import SpecError


def test_hermes_reads_one_call_and_keeps_the_text():
    text = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    turn = hermes(text)
    assert turn.text == text
    assert turn.tool_calls == (ToolCall("add", {"a": 1, "b": 2}, "call_0"),)
    assert turn.parse_errors == ()


def test_hermes_reads_several_calls_in_order():
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call> and '
        '<tool_call>{"name": "b", "arguments": "{\\"x\\": 3}"}</tool_call>'
    )
    turn = hermes(text)
    assert [c.name for c in turn.tool_calls] == ["a", "b"]
    assert turn.tool_calls[1].arguments == {"x": 3}  # arguments given as a JSON string


def test_hermes_turns_without_calls_have_no_calls_and_no_errors():
    turn = hermes("The answer is 4.")
    assert turn.tool_calls == () and turn.parse_errors == ()


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("<tool_call>{not json}</tool_call>", "not JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'expected {"name"'),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "must be an object"),
        ('<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>', "arguments are not JSON"),
        ("<tool_call>  </tool_call>", "empty"),
        ('<tool_call>{"name": "a", "arguments": {}}', "unclosed"),
    ],
)
def test_hermes_reports_malformed_calls_as_parse_errors(body, complaint):
    turn = hermes("before " + body)
    assert turn.tool_calls == ()
    assert len(turn.parse_errors) == 1 and complaint in turn.parse_errors[0]


def test_a_malformed_call_does_not_hide_the_well_formed_ones():
    turn = hermes(
        '<tool_call>{"name": "ok", "arguments": {}}</tool_call><tool_call>{bad</tool_call>'
    )
    assert [c.name for c in turn.tool_calls] == ["ok"]
    assert turn.parse_errors[0].startswith("tool call 1:")


def test_an_unknown_parser_name_lists_the_known_ones():
    with pytest.raises(SpecError, match=r"unknown tool-call parser 'hermez' \(known: .*hermes"):
        tool_parser("hermez")


def test_a_format_is_one_registered_function_or_a_module_path():
    @register_tool_parser("shout")
    def shout(text: str):
        return hermes(text.lower())

    assert tool_parser("shout") is shout
    assert tool_parser("tests.support.agent_envs:always_call")("abc").tool_calls[0].arguments == {
        "key": 3
    }
    with pytest.raises(SpecError, match="tool_parser"):
        tool_parser("tests.support.agent_envs:nope")
