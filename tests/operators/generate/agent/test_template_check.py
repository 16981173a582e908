"""The tokenisation contract of multi-turn rollouts (operators/generate/agent/template_check.py): a
chat
template must extend the previous turn's tokens; `rldag validate` and `rldag run` refuse one
that does not (exit 2) before anything runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from flows.cli import main
from operators.generate.agent.template_check import (
    DEFAULT_TOOL,
    check_chat_template,
    check_model_template,
    sample_conversation,
)
from rldag.config.errors import InputError

# Qwen3-style: the reasoning of assistant turns before the last user message is dropped.
STRIPS_EARLIER_REASONING = (
    "{% set ns = namespace(last=0) %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}"
    "{% endif %}{% endfor %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and loop.index0 < ns.last %}"
    "{{ m.content.split('</think>')[-1] }}"
    "{% else %}{{ m.content }}{% endif %}{% endfor %}"
)
# ChatML with the tools listed in the system turn: extends every turn.
CHATML_WITH_TOOLS = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>"
    "{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Extends every turn, but numbers them: a turn renders differently after the first messages
# alone than after the whole conversation.
NUMBERS_TURNS = "{% for m in messages %}{{ loop.index }}={{ m.content }}{% endfor %}"
NO_TOOL_ROLE = (
    "{% for m in messages %}{% if m.role == 'tool' %}"
    "{{ raise_exception('tool messages are not supported') }}{% endif %}"
    "{{ m.content }}{% endfor %}"
)


@pytest.fixture
def tokenizer(tiny_task):
    return AutoTokenizer.from_pretrained(tiny_task / "model")


def with_template(tokenizer, template: str):
    tokenizer.chat_template = template
    return tokenizer


def test_the_tiny_models_template_extends_every_turn(tiny_task, tokenizer):
    check_chat_template(tokenizer)
    check_model_template(str(tiny_task / "model"), [DEFAULT_TOOL])
    check_chat_template(with_template(tokenizer, CHATML_WITH_TOOLS), [DEFAULT_TOOL])


def test_a_template_that_strips_earlier_reasoning_is_refused_at_the_turn_that_breaks(tokenizer):
    messages = sample_conversation()
    assert [m["role"] for m in messages].index("user", 2) == 5  # the follow-up is turn 6
    with pytest.raises(InputError) as info:
        check_chat_template(with_template(tokenizer, STRIPS_EARLIER_REASONING))
    message = str(info.value)
    assert message.startswith("model_path: the chat template is not prefix-preserving")
    assert "rendering turn 6 (user) changes the tokens of turns 1-5" in message
    # system "1+1=2" (5 tokens) and user "37+58=" (6) are kept; the reasoning goes
    assert "from token 11 on ('58+3795" in message


def test_a_template_whose_turns_depend_on_earlier_turns_is_refused(tokenizer):
    with pytest.raises(InputError) as info:
        check_chat_template(with_template(tokenizer, NUMBERS_TURNS))
    message = str(info.value)
    assert message.startswith("model_path: the chat template renders turn 6 (user) differently")
    assert "'6=95+1=' vs '4=95+1='" in message  # turn 6 of the whole, 4 after the first


def test_a_template_that_cannot_render_a_turn_names_it(tokenizer):
    with pytest.raises(InputError, match=r"fails to render turn 4 \(tool\): .*not supported"):
        check_chat_template(with_template(tokenizer, NO_TOOL_ROLE))
    tokenizer.chat_template = None
    with pytest.raises(InputError, match="the tokenizer has no chat template"):
        check_chat_template(tokenizer)


def test_the_sample_conversation_calls_the_first_tool_with_typed_arguments():
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}, "n": {"type": "integer"}},
            },
        },
    }
    messages = sample_conversation([tool])
    assert (
        '<tool_call>{"name": "lookup", "arguments": {"key": "37+58", "n": 37}}'
        in (messages[2]["content"])
    )
    assert messages[3] == {"role": "tool", "name": "lookup", "content": "95"}
    assert (
        '{"name": "python", "arguments": {"code": "37+58"}}' in sample_conversation()[2]["content"]
    )


def stripping_model(tiny_task: Path, tmp_path: Path) -> Path:
    """A copy of the tiny model whose chat template strips earlier reasoning."""
    model = tmp_path / "model"
    shutil.copytree(tiny_task / "model", model)
    (model / "chat_template.jinja").write_text(STRIPS_EARLIER_REASONING)
    return model


@pytest.mark.parametrize("command", ["validate", "run"])
def test_validate_and_run_refuse_the_template_naming_node_key_and_turn(
    command, tiny_task, tmp_path, write_yaml, dataset, capsys
):
    spec = {
        "name": "agent-template",
        "model": {"path": str(stripping_model(tiny_task, tmp_path))},
        "storage": {"uri": f"file://{tmp_path}/runs"},
        "nodes": {
            "prompts": {
                "kind": "source",
                "op": "dataset",
                "params": {"path": str(dataset), "batch_size": 6},
            },
            "agent": {
                "kind": "generate",
                "op": "agent_loop",
                "inputs": {"prompts": "prompts"},
                "params": {"model_path": "${model.path}", "tools": ["python"]},
            },
        },
    }
    path = write_yaml(spec)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert "nodes.agent.params.model_path: node 'agent': the chat template is not" in err
    assert "rendering turn 6 (user)" in err
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing written
    (tmp_path / "model" / "chat_template.jinja").write_text(CHATML_WITH_TOOLS)
    if command == "validate":
        assert main([command, str(path)]) == 0
